"""What bench times for each op: tritonkit's kernel, the eager reference, Inductor, peers, and speed-of-light
references where they exist.

tritonkit         ``spec.call(inputs)``: the public op as a user calls it.
eager             ``spec.reference(inputs, dtype)`` on native-dtype inputs: eager PyTorch (float32 statistics).
inductor          ``torch.compile(reference, dynamic=False)``. Static shapes: Dynamo is reset at every point, so
                  each num_tokens is compiled on its own, as a server that captures one graph per batch size gets;
                  that is one compile per point, by design, and the strongest code Inductor makes for that shape.
                  Not for ops whose reference loops over data-dependent lengths on the host (``NOT_COMPILABLE``).
inductor-dynamic  ``torch.compile(reference, dynamic=True)``, compiled once per op config (not a default): what a
                  user who does not pin shapes gets.
vllm              vLLM's Triton kernel for the op where vLLM has one (reshape_and_cache:
                  ``triton_reshape_and_cache_flash``; paged_attention: ``unified_attention``, called as vLLM's
                  Triton backend calls it; fused_moe: ``fused_moe_kernel`` with vLLM's tuned tables, its two
                  GEMM launches alone timed, see :mod:`.moe_peer`). Optional, never a dependency: put vLLM, or its
                  Triton kernels extracted by
                  ``shared/peers/vllm-triton-kernels.sh`` / ``vllm-fused-moe.sh``, on PYTHONPATH.
sdpa              ``torch.nn.functional.scaled_dot_product_attention`` on dense copies of the point's keys and
                  values (gathered from the paged cache outside the timing): the speed-of-light reference of
                  paged_attention where a dense call computes the same thing (a causal prompt: cuDNN's kernel; a
                  prompt after cached keys: bottom-right causal mask; a decode batch of equal lengths), skipped
                  with the reason elsewhere.

base@<sha>         ``tritonkit bench --base REV``: the op of another git revision, imported beside this one.

Every provider's outputs are checked against the float64 reference before it is timed; a wrong provider is
reported as wrong and not timed. A provider's ``prepare`` builds what it needs from a point's inputs (dense
copies, output and scratch buffers) outside the timed region; :class:`Inapplicable` from it skips the point.
"""

from __future__ import annotations

import contextlib
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
from .records import CheckResult as Check

DEFAULT_PROVIDERS = ("tritonkit", "eager", "inductor", "vllm", "sdpa")
ALL_PROVIDERS = ("tritonkit", "eager", "inductor", "inductor-dynamic", "vllm", "sdpa")

#: ops whose reference Inductor cannot compile into one graph, and why
NOT_COMPILABLE = {
    "paged_attention": "its reference reads sequence lengths on the host and loops over them (a graph break per "
                       "batch layout), so torch.compile of it is no peer; sdpa is the dense speed-of-light",
    "fused_moe": "its reference gathers each expert's tokens with data-dependent sizes (nonzero), a graph break per "
                 "expert; vllm (vLLM's tuned Triton GEMM) is the peer",
    "moe_align_block_size": "its reference sorts with data-dependent sizes (boolean-mask indexing): a graph break",
}


class Unavailable(Exception):
    """A provider that cannot run for this op here (not installed, no kernel for the op)."""


class Inapplicable(Exception):
    """A provider that exists for the op but cannot compute this point (a dense reference on a varlen batch)."""


@dataclasses.dataclass
class Provider:
    name: str
    description: str
    fn: Callable[[dict], dict]
    #: module-name prefixes whose Triton kernels this provider launches (for compile counts)
    kernel_modules: tuple[str, ...] = ()
    #: called before the first call at each shape (Inductor resets Dynamo here)
    begin_shape: Callable[[Shape], None] | None = None
    #: ``(inputs) -> inputs for fn``, outside the timing; raises Inapplicable where the provider has no answer
    prepare: Callable[[dict], dict] | None = None
    #: context manager that NaN-poisons the outputs the provider allocates during its check (its own tree's)
    poison: Callable[[], Any] | None = None
    #: a provider timed earlier: ``{(op, dtype, shape id): point record}`` reused instead of timing again
    cached: dict | None = None
    #: what the correctness check runs instead of ``fn``, where ``fn`` times only part of the computation (vLLM's
    #: two MoE GEMMs without the CUDA ops around them): the whole computation on the same prepared inputs
    check_fn: Callable[[dict], dict] | None = None

    def __call__(self, inputs: dict) -> dict:
        return self.fn(inputs)

    def prepared(self, inputs: dict) -> dict:
        return self.prepare(inputs) if self.prepare is not None else inputs


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
    except Exception as e:  # noqa: BLE001 - ImportError, or a stand-in module vLLM's file does not agree with
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


#: vLLM's Triton backend: the split ("3D") decode kernel below this many sequences x KV heads, 16 segments
VLLM_3D_SEQS_X_KV_HEADS = 128
VLLM_SOFTMAX_SEGMENTS = 16


def _vllm_unified_attention(spec: OpSpec, dtype: torch.dtype) -> Provider:
    mod_name = "vllm.v1.attention.ops.triton_unified_attention"
    try:
        ua = importlib.import_module(mod_name).unified_attention
    except Exception as e:  # noqa: BLE001 - ImportError, or a stand-in module vLLM's file does not agree with
        raise Unavailable(f"vLLM not importable ({type(e).__name__}: {e})") from None

    def prepare(inputs: dict) -> dict:
        # what vLLM's Triton attention backend allocates once per batch: the output and the 3D kernel's scratch
        q = inputs["q"]
        t, hq, d = q.shape
        segs = VLLM_SOFTMAX_SEGMENTS
        f32 = dict(dtype=torch.float32, device=q.device)
        window = inputs.get("window_size", (-1, -1))
        fp8 = inputs["k_cache"].dtype == torch.float8_e4m3fn
        kw = dict(q=q, k=inputs["k_cache"], v=inputs["v_cache"], out=torch.empty_like(q),
                  cu_seqlens_q=inputs["cu_seqlens_q"], max_seqlen_q=inputs["max_seqlen_q"],
                  seqused_k=inputs["seqused_k"], max_seqlen_k=inputs["max_seqlen_k"], softmax_scale=d ** -0.5,
                  causal=bool(inputs.get("causal", True)), window_size=tuple(window),
                  block_table=inputs["block_table"], softcap=float(inputs.get("softcap", 0.0)), q_descale=None,
                  k_descale=inputs.get("k_scale") if fp8 else None, v_descale=inputs.get("v_scale") if fp8 else None,
                  seq_threshold_3D=VLLM_3D_SEQS_X_KV_HEADS // inputs["k_cache"].shape[2],
                  num_par_softmax_segments=segs,
                  softmax_segm_output=torch.empty(t, hq, segs, 1 << (d - 1).bit_length(), **f32),
                  softmax_segm_max=torch.empty(t, hq, segs, **f32),
                  softmax_segm_expsum=torch.empty(t, hq, segs, **f32), sinks=inputs.get("sinks"))
        if fp8:
            kw["kv_quant_mode"] = 1  # KVQuantMode.FP8_PER_TENSOR
        return kw

    def fn(kw: dict) -> dict:
        ua(**kw)
        return {"out": kw["out"]}

    return Provider("vllm", f"{mod_name}.unified_attention (vLLM's Triton backend: 3D decode below "
                            f"{VLLM_3D_SEQS_X_KV_HEADS} seqs x KV heads, {VLLM_SOFTMAX_SEGMENTS} segments)", fn,
                    (mod_name,), prepare=prepare)


def _dense_kv(inputs: dict, s: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence s's keys and values gathered from the paged cache into [Hkv, L, D]."""
    n = int(inputs["seqused_k"][s])
    bs = inputs["k_cache"].shape[1]
    pages = inputs["block_table"][s, :-(-n // bs)].long()
    hkv, d = inputs["k_cache"].shape[2:]
    k = inputs["k_cache"][pages].reshape(-1, hkv, d)[:n].transpose(0, 1).contiguous()
    v = inputs["v_cache"][pages].reshape(-1, hkv, d)[:n].transpose(0, 1).contiguous()
    return k, v


def _sdpa_attention(spec: OpSpec, dtype: torch.dtype) -> Provider:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def prepare(inputs: dict) -> dict:
        q = inputs["q"]
        cu = inputs["cu_seqlens_q"].tolist()
        q_lens = [b - a for a, b in zip(cu, cu[1:])]
        seq_k = inputs["seqused_k"].tolist()
        plain = (bool(inputs.get("causal", True)) and tuple(inputs.get("window_size", (-1, -1))) == (-1, -1)
                 and not inputs.get("softcap") and inputs.get("sinks") is None)
        if inputs["k_cache"].dtype != q.dtype or not plain:
            raise Inapplicable("SDPA has no paged fp8 cache, window, softcap or sinks: no dense equivalent")
        if len(q_lens) == 1 and q_lens[0] > 1:
            # one causal prompt: cuDNN's attention (the fastest SDPA backend on Hopper), KV heads expanded; a
            # prompt after cached keys (chunked prefill) needs the bottom-right causal mask, which SDPA runs on its
            # memory-efficient kernel
            k, v = _dense_kv(inputs, 0)
            group = q.shape[1] // k.shape[0]
            kw = {"q": q.transpose(0, 1).unsqueeze(0), "k": k.repeat_interleave(group, 0).unsqueeze(0),
                  "v": v.repeat_interleave(group, 0).unsqueeze(0), "causal": True, "mask": None,
                  "backend": SDPBackend.CUDNN_ATTENTION if q.is_cuda else SDPBackend.MATH}
            if q_lens[0] != seq_k[0]:
                from torch.nn.attention.bias import causal_lower_right
                kw.update(causal=False, mask=causal_lower_right(q_lens[0], seq_k[0]))
            return kw
        if len(set(q_lens)) == 1 and q_lens[0] > 1 and len(set(seq_k)) == 1:
            # equal chunks after equal contexts (speculative decoding's verify step): [B, Hq, n, D] against the
            # dense [B, Hq, L, D] keys, bottom-right causal
            from torch.nn.attention.bias import causal_lower_right
            ks, vs = zip(*(_dense_kv(inputs, s) for s in range(len(q_lens))))
            b, n = len(q_lens), q_lens[0]
            group = q.shape[1] // ks[0].shape[0]
            return {"q": q.view(b, n, q.shape[1], q.shape[2]).transpose(1, 2),
                    "k": torch.stack(ks).repeat_interleave(group, 1), "v": torch.stack(vs).repeat_interleave(group, 1),
                    "causal": False, "mask": causal_lower_right(n, seq_k[0]), "backend": None, "batched": True}
        if all(n == 1 for n in q_lens) and len(set(seq_k)) == 1:
            # a decode batch of equal lengths: [B, Hq, 1, D] against [B, Hkv, L, D]
            ks, vs = zip(*(_dense_kv(inputs, s) for s in range(len(q_lens))))
            return {"q": q.unsqueeze(2), "k": torch.stack(ks), "v": torch.stack(vs), "causal": False,
                    "mask": None, "backend": None}
        raise Inapplicable("a varlen batch (mixed lengths or prefill beside decode) has no single dense SDPA call")

    def fn(kw: dict) -> dict:
        if kw.get("batched"):
            o = F.scaled_dot_product_attention(kw["q"], kw["k"], kw["v"], attn_mask=kw["mask"])
            return {"out": o.transpose(1, 2).reshape(-1, o.shape[1], o.shape[3])}  # [B, Hq, n, D] -> [B n, Hq, D]
        if kw["causal"]:
            with sdpa_kernel(kw["backend"]):
                o = F.scaled_dot_product_attention(kw["q"], kw["k"], kw["v"], is_causal=True)
            return {"out": o[0].transpose(0, 1)}  # [1, Hq, T, D] -> [T, Hq, D]
        if kw["mask"] is not None:
            o = F.scaled_dot_product_attention(kw["q"], kw["k"], kw["v"], attn_mask=kw["mask"])
            return {"out": o[0].transpose(0, 1)}
        o = F.scaled_dot_product_attention(kw["q"], kw["k"], kw["v"], enable_gqa=True)
        return {"out": o[:, :, 0]}  # [B, Hq, 1, D] -> [B, Hq, D]

    return Provider("sdpa", "torch SDPA on dense K/V gathered outside the timing (causal prompt: cuDNN; decode "
                            "batch of equal lengths: default backend with GQA; equal chunks after equal contexts: "
                            "bottom-right causal mask): the dense speed-of-light", fn,
                    prepare=prepare)


#: op name -> factory of vLLM's Triton kernel for it
def _vllm_fused_moe(spec: OpSpec, dtype: torch.dtype) -> Provider:
    from .moe_peer import vllm_fused_moe  # it builds on this module's Provider
    return vllm_fused_moe(spec, dtype)


PEERS: dict[str, Callable[[OpSpec, torch.dtype], Provider]] = {
    "reshape_and_cache": _vllm_reshape_and_cache,
    "paged_attention": _vllm_unified_attention,
    "fused_moe": _vllm_fused_moe,
}
#: op name -> factory of its dense speed-of-light reference
SPEED_OF_LIGHT: dict[str, Callable[[OpSpec, torch.dtype], Provider]] = {
    "paged_attention": _sdpa_attention,
}


def base_provider(tree, spec: OpSpec, dtype: torch.dtype, cached: dict | None = None) -> Provider:
    """The op as another git revision has it (``tritonkit bench --base REV``): that tree's ``spec.call`` on this
    tree's inputs, named ``base@<sha>``; its compile counts from the tree's kernel modules."""
    from .base import BaseTreeError
    try:
        base_spec = tree.get_spec(spec.name)
        poison = getattr(tree.module("ops"), "poison_outputs", None)
    except BaseTreeError as e:
        raise Unavailable(str(e)) from None
    return Provider(tree.label, f"tritonkit.ops.{spec.name} at {tree.sha[:12]} ({tree.rev})", base_spec.call,
                    (f"{tree.alias}.ops.{spec.name}",), poison=poison, cached=cached)


def make_provider(name: str, spec: OpSpec, dtype: torch.dtype) -> Provider:
    """The provider ``name`` for ``spec`` at ``dtype``; raises Unavailable when it cannot run here."""
    if name == "tritonkit":
        return _tritonkit(spec, dtype)
    if name == "eager":
        return _eager(spec, dtype)
    if name in ("inductor", "inductor-dynamic"):
        if spec.name in NOT_COMPILABLE:
            raise Unavailable(NOT_COMPILABLE[spec.name])
        return _inductor(spec, dtype, dynamic=name == "inductor-dynamic")
    if name == "vllm":
        if spec.name not in PEERS:
            raise Unavailable(f"vLLM has no Triton kernel for {spec.name} (its kernel is CUDA C++)")
        return PEERS[spec.name](spec, dtype)
    if name == "sdpa":
        if spec.name not in SPEED_OF_LIGHT:
            raise Unavailable(f"no dense speed-of-light reference for {spec.name}")
        return SPEED_OF_LIGHT[spec.name](spec, dtype)
    raise ValueError(f"unknown provider {name!r}; known: {', '.join(ALL_PROVIDERS)}")


@dataclasses.dataclass
class Oracle:
    """What a provider's outputs are checked against at a point: the float64 reference's outputs, the spec's error
    scales for outputs that can cancel (what ``tritonkit validate`` compares with), and per output the rows of the
    provider's output they cover (none: all of it; ``OpSpec.oracle_inputs`` samples rows of large layers)."""

    refs: dict
    scales: dict
    rows: dict

    def select(self, name: str, out: torch.Tensor) -> torch.Tensor:
        rows = self.rows.get(name)
        return out if rows is None else out[rows]


def reference(spec: OpSpec, dtype: torch.dtype, inputs: dict) -> Oracle:
    """The float64 oracle of ``inputs``: every floating tensor upcast, or the spec's own sample of them."""
    ref_inputs, rows = spec.oracle_inputs(inputs) if spec.oracle_inputs else (upcast(inputs), {})
    scales = spec.error_scale(ref_inputs) if spec.error_scale else {}
    return Oracle(spec.reference(ref_inputs, dtype), scales, dict(rows))


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


def check(provider: Provider, spec: OpSpec, dtype: torch.dtype, inputs: dict, oracle: Oracle) -> Check:
    """Run ``provider`` once (its ``check_fn`` where it has one) on a copy of ``inputs`` and compare every output
    with the float64 ``oracle`` (:func:`reference`), on the rows it covers.

    Outputs tritonkit allocates start as NaN, so an element the kernel never writes fails. Exceptions become a
    failed check with the exception as detail; :class:`Inapplicable` from ``prepare`` propagates (a skip).
    """
    tol = spec.tolerance_for(dtype)
    try:
        with poison_outputs(), (provider.poison() if provider.poison else contextlib.nullcontext()):
            outs = (provider.check_fn or provider.fn)(provider.prepared(clone_inputs(inputs)))
        dev = next((v.device for v in inputs.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    except Inapplicable:
        raise
    except Exception as e:  # noqa: BLE001 - reported, never raised: one broken provider does not stop the sweep
        return Check(False, float("inf"), float("inf"), f"{type(e).__name__}: {e}"[:500])
    missing = set(oracle.refs) - set(outs)
    if missing:
        return Check(False, float("inf"), float("inf"), f"missing outputs {sorted(missing)}")
    comps = {name: compare(oracle.select(name, outs[name]), ref, tol, oracle.scales.get(name))
             for name, ref in oracle.refs.items()}
    name, c = max(comps.items(), key=lambda kv: (not kv[1].passed, kv[1].error))
    bad = [n for n, cn in comps.items() if not cn.passed]
    detail = f"{name}: {c.describe()}" + (f" (failing: {', '.join(bad)})" if len(bad) > 1 else "")
    return Check(not bad, c.error, c.rel_l2, detail)


def find_kernels(prefixes: tuple[str, ...]) -> dict[str, Any]:
    """``{module.name: JITFunction}`` for every Triton kernel defined in loaded modules under ``prefixes``."""
    from .._triton_compat import JITFunction

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
    from .._triton_compat import compiled_kernels
    return {name: compiled_kernels(k) for name, k in kernels.items()}
