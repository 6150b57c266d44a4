"""What bench times for each op: tritonkit's kernel, the eager reference, Inductor, and peers when importable.

tritonkit         ``spec.call(inputs)``: the public op as a user calls it.
eager             ``spec.reference(inputs, dtype)`` on native-dtype inputs: eager PyTorch (float32 statistics).
inductor          ``torch.compile(reference, dynamic=False)``. Static shapes: Dynamo is reset at every point, so
                  each num_tokens is compiled on its own, as a server that captures one graph per batch size gets;
                  that is one compile per point, by design, and the strongest code Inductor makes for that shape.
inductor-dynamic  ``torch.compile(reference, dynamic=True)``, compiled once per op config (not a default): what a
                  user who does not pin shapes gets.
vllm              vLLM's Triton kernel for the op where vLLM has one (reshape_and_cache:
                  ``triton_reshape_and_cache_flash``). Optional, never a dependency: put vLLM, or its Triton kernels
                  extracted by ``shared/peers/vllm-triton-kernels.sh``, on PYTHONPATH.

Every provider's outputs are checked against the float64 reference before it is timed; a wrong provider is
reported as wrong and not timed.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable
from typing import Any

import torch

from ..ops import poison_outputs
from ..spec import OpSpec, Shape
from ..testing import compare
from ..testing.validate import upcast

DEFAULT_PROVIDERS = ("tritonkit", "eager", "inductor", "vllm")
ALL_PROVIDERS = ("tritonkit", "eager", "inductor", "inductor-dynamic", "vllm")


class Unavailable(Exception):
    """A provider that cannot run for this op here (not installed, no kernel for the op)."""


@dataclasses.dataclass
class Provider:
    name: str
    description: str
    fn: Callable[[dict], dict]
    #: module-name prefixes whose Triton kernels this provider launches (for compile counts)
    kernel_modules: tuple[str, ...] = ()
    #: called before the first call at each shape (Inductor resets Dynamo here)
    begin_shape: Callable[[Shape], None] | None = None

    def __call__(self, inputs: dict) -> dict:
        return self.fn(inputs)


def _tritonkit(spec: OpSpec, dtype: torch.dtype) -> Provider:
    return Provider("tritonkit", f"tritonkit.ops.{spec.name}", spec.call, (f"tritonkit.ops.{spec.name}",))


def _eager(spec: OpSpec, dtype: torch.dtype) -> Provider:
    ref = spec.reference
    return Provider("eager", "the spec's reference, eager PyTorch on native-dtype inputs",
                    lambda inputs: ref(inputs, dtype))


def _inductor(spec: OpSpec, dtype: torch.dtype, dynamic: bool = False) -> Provider:
    ref = spec.reference
    state: dict[str, Any] = {}

    def compile_fresh() -> None:
        # a reset drops every compiled frame, so each shape gets its own static compile and no recompile limit
        torch._dynamo.reset()
        state["fn"] = torch.compile(lambda inputs: ref(inputs, dtype), dynamic=dynamic)

    def begin_shape(shape: Shape) -> None:
        if not dynamic or "fn" not in state:
            compile_fresh()

    def fn(inputs: dict) -> dict:
        if "fn" not in state:
            compile_fresh()
        return state["fn"](inputs)

    if dynamic:
        return Provider("inductor-dynamic", "torch.compile(reference, dynamic=True), one compile per op config", fn,
                        begin_shape=begin_shape)
    return Provider("inductor", "torch.compile(reference, dynamic=False), one static compile per point", fn,
                    begin_shape=begin_shape)


def _vllm_reshape_and_cache(spec: OpSpec, dtype: torch.dtype) -> Provider:
    mod_name = "vllm.v1.attention.ops.triton_reshape_and_cache_flash"
    try:
        mod = importlib.import_module(mod_name)
        kernel = mod.triton_reshape_and_cache_flash
    except Exception as e:  # ImportError, or a stand-in module vLLM's file does not agree with
        raise Unavailable(f"vLLM not importable ({type(e).__name__}: {e})") from None
    # the spec's own view of what a call produced (caches and the guard regions around them)
    outputs = importlib.import_module(spec.call.__module__).outputs
    scales: dict[torch.device, torch.Tensor] = {}

    def fn(inputs: dict) -> dict:
        key = inputs["key"]
        one = scales.get(key.device)
        if one is None:
            one = scales[key.device] = torch.ones((), dtype=torch.float32, device=key.device)
        k_scale = inputs.get("k_scale")
        v_scale = inputs.get("v_scale")
        kernel(key, inputs["value"], inputs["key_cache"], inputs["value_cache"], inputs["slot_mapping"],
               inputs.get("kv_cache_dtype", "auto"),
               one if k_scale is None else k_scale, one if v_scale is None else v_scale)
        return outputs(inputs)

    return Provider("vllm", f"{mod_name}.triton_reshape_and_cache_flash", fn, (mod_name,))


#: op name -> factory of vLLM's Triton kernel for it
PEERS: dict[str, Callable[[OpSpec, torch.dtype], Provider]] = {
    "reshape_and_cache": _vllm_reshape_and_cache,
}


def make_provider(name: str, spec: OpSpec, dtype: torch.dtype) -> Provider:
    """The provider ``name`` for ``spec`` at ``dtype``; raises Unavailable when it cannot run here."""
    if name == "tritonkit":
        return _tritonkit(spec, dtype)
    if name == "eager":
        return _eager(spec, dtype)
    if name == "inductor":
        return _inductor(spec, dtype)
    if name == "inductor-dynamic":
        return _inductor(spec, dtype, dynamic=True)
    if name == "vllm":
        if spec.name not in PEERS:
            raise Unavailable(f"vLLM has no Triton kernel for {spec.name} (its kernel is CUDA C++)")
        return PEERS[spec.name](spec, dtype)
    raise ValueError(f"unknown provider {name!r}; known: {', '.join(ALL_PROVIDERS)}")


def reference(spec: OpSpec, dtype: torch.dtype, inputs: dict) -> tuple[dict, dict]:
    """The float64 oracle's outputs for ``inputs``, and the spec's error scales for outputs that can cancel (what
    ``tritonkit validate`` compares with)."""
    ref_inputs = upcast(inputs)
    return spec.reference(ref_inputs, dtype), (spec.error_scale(ref_inputs) if spec.error_scale else {})


def clone_inputs(inputs: dict) -> dict:
    """A copy a provider may write into (in-place ops) without touching the original.

    Aliasing survives: tensors that share storage (``q`` and ``k`` as views of a fused ``qkv``) become views of
    one copied storage with the same offsets and strides, so an op writing through ``q`` shows in ``qkv``.
    """
    storages: dict[int, Any] = {}
    out = {}
    for k, v in inputs.items():
        if not isinstance(v, torch.Tensor):
            out[k] = v
            continue
        st = v.untyped_storage()
        key = st.data_ptr()
        if key not in storages:
            storages[key] = st.clone()
        out[k] = torch.empty(0, dtype=v.dtype, device=v.device).set_(storages[key], v.storage_offset(), v.size(),
                                                                     v.stride())
    return out


@dataclasses.dataclass
class Check:
    passed: bool
    error: float
    rel_l2: float
    detail: str


def check(provider: Provider, spec: OpSpec, dtype: torch.dtype, inputs: dict, refs: dict,
          scales: dict | None = None) -> Check:
    """Run ``provider`` once on a copy of ``inputs`` and compare every output with the float64 ``refs`` (with the
    error ``scales`` of :func:`reference`).

    Outputs tritonkit allocates start as NaN, so an element the kernel never writes fails. Exceptions become a
    failed check with the exception as detail.
    """
    tol = spec.tolerance_for(dtype)
    try:
        with poison_outputs():
            outs = provider(clone_inputs(inputs))
        dev = next((v.device for v in inputs.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    except Exception as e:  # reported, never raised: one broken provider does not stop the sweep
        return Check(False, float("inf"), float("inf"), f"{type(e).__name__}: {e}"[:500])
    missing = set(refs) - set(outs)
    if missing:
        return Check(False, float("inf"), float("inf"), f"missing outputs {sorted(missing)}")
    scales = scales or {}
    comps = {name: compare(outs[name], ref, tol, scales.get(name)) for name, ref in refs.items()}
    name, c = max(comps.items(), key=lambda kv: (not kv[1].passed, kv[1].error))
    bad = [n for n, cn in comps.items() if not cn.passed]
    detail = f"{name}: {c.describe()}" + (f" (failing: {', '.join(bad)})" if len(bad) > 1 else "")
    return Check(not bad, c.error, c.rel_l2, detail)


def find_kernels(prefixes: tuple[str, ...]) -> dict[str, Any]:
    """``{module.name: JITFunction}`` for every Triton kernel defined in loaded modules under ``prefixes``."""
    from triton.runtime.jit import JITFunction

    found: dict[str, Any] = {}
    seen: set[int] = set()
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not any(mod_name == p or mod_name.startswith(p + ".") for p in prefixes):
            continue
        for attr, obj in list(vars(mod).items()):
            fn = obj
            # autotune / heuristics wrappers hold the JITFunction in .fn
            while fn is not None and not isinstance(fn, JITFunction) and hasattr(fn, "fn"):
                fn = fn.fn
            if isinstance(fn, JITFunction) and getattr(fn, "module", mod_name) == mod_name and id(fn) not in seen:
                seen.add(id(fn))
                found[f"{mod_name}.{attr}"] = fn
    return found


def compile_counts(kernels: dict[str, Any]) -> dict[str, int]:
    """Compiled specializations held by each kernel, over all devices.

    Triton 3.6: ``JITFunction.device_caches[device][0]`` is the dict of compiled kernels keyed by specialization
    (argument types, divisibility/alignment flags, constexpr values, options such as num_warps).
    """
    counts = {}
    for name, k in kernels.items():
        caches = getattr(k, "device_caches", {})
        counts[name] = sum(len(entry[0]) for entry in list(caches.values()))
    return counts
