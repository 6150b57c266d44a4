"""What bench times for each op: tritonkit's kernel, the eager reference, Inductor, peers, and speed-of-light
references where they exist.

tritonkit         ``spec.call(inputs)``: the public op as a user calls it.
eager             ``spec.reference(inputs, dtype)`` on native-dtype inputs: eager PyTorch (float32 statistics).
inductor          ``torch.compile(reference, dynamic=False)``. Static shapes: Dynamo is reset at every point, so
                  each num_tokens is compiled on its own, as a server that captures one graph per batch size gets;
                  that is one compile per point, by design, and the strongest code Inductor makes for that shape.
                  Not for ops whose reference loops over data-dependent lengths on the host
                  (``OpSpec.not_compilable`` says why).
inductor-dynamic  ``torch.compile(reference, dynamic=True)``, compiled once per op config (not a default): what a
                  user who does not pin shapes gets.
<peer names>      what the op's OpSpec declares in ``peers`` (``vllm``: vLLM's Triton kernel where vLLM has one) and
                  ``speed_of_light`` (``sdpa``: dense attention for paged_attention), each a factory in
                  ``ops/<op>/peers.py`` returning a :class:`~tritonkit.spec.Peer`; unavailable for an op that declares
                  none of that name. Optional packages (vLLM) are never dependencies: unavailable when absent.

base@<sha>         ``tritonkit bench --base REV``: the op of another git revision, imported beside this one.

Every provider's outputs are checked against the float64 reference before it is timed; a wrong provider is
reported as wrong and not timed. A provider's ``prepare`` builds what it needs from a point's inputs (dense
copies, output and scratch buffers) outside the timed region; :class:`Inapplicable` from it skips the point.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..ops import poison_outputs
from ..spec import Inapplicable, OpSpec, Peer, Shape, Unavailable
from ..testing import compare
from ..spec import upcast
from .records import CheckResult as Check

from .provider_names import GENERIC_PROVIDERS, NOT_DEFAULT


def declared_providers(specs: Iterable[OpSpec]) -> tuple[str, ...]:
    """The peer and speed-of-light names ``specs`` declare, peers first, each once, in declaration order."""
    specs = list(specs)
    names = [n for s in specs for n in s.peers] + [n for s in specs for n in s.speed_of_light]
    return tuple(dict.fromkeys(n for n in names if n not in GENERIC_PROVIDERS))


def all_providers() -> tuple[str, ...]:
    """Every provider name the bench knows: the generic ones, then those the built-in ops' specs declare."""
    from ..ops import specs

    return GENERIC_PROVIDERS + declared_providers(specs().values())


def __getattr__(name: str):
    # ALL_PROVIDERS and DEFAULT_PROVIDERS come from the specs, built on first use, not at this module's import
    if name == "ALL_PROVIDERS":
        return all_providers()
    if name == "DEFAULT_PROVIDERS":
        return tuple(n for n in all_providers() if n not in NOT_DEFAULT)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    return Provider(
        "eager", "the spec's reference, eager PyTorch on native-dtype inputs", lambda inputs: ref(inputs, dtype)
    )


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
        return Provider(
            "inductor-dynamic",
            "torch.compile(reference, dynamic=True), one compile per op config",
            fn,
            begin_shape=begin_shape,
        )
    return Provider(
        "inductor", "torch.compile(reference, dynamic=False), one static compile per point", fn, begin_shape=begin_shape
    )


def _declared(factory: Callable[[OpSpec, torch.dtype], Peer], name: str, spec: OpSpec, dtype: torch.dtype) -> Provider:
    """The peer or speed-of-light reference the spec declares under ``name``, as a provider."""
    peer = factory(spec, dtype)
    if not isinstance(peer, Peer):
        raise TypeError(f"OpSpec {spec.name!r}: its {name} factory returned {type(peer).__name__}, not a Peer")
    return Provider(
        name, peer.description, peer.fn, tuple(peer.kernel_modules), prepare=peer.prepare, check_fn=peer.check_fn
    )


def base_provider(tree, spec: OpSpec, dtype: torch.dtype, cached: dict | None = None) -> Provider:
    """The op as another git revision has it (``tritonkit bench --base REV``): that tree's ``spec.call`` on this
    tree's inputs, named ``base@<sha>``; its compile counts from the tree's kernel modules."""
    from .base import BaseTreeError

    try:
        base_spec = tree.get_spec(spec.name)
        poison = getattr(tree.module("ops"), "poison_outputs", None)
    except BaseTreeError as e:
        raise Unavailable(str(e)) from None
    return Provider(
        tree.label,
        f"tritonkit.ops.{spec.name} at {tree.sha[:12]} ({tree.rev})",
        base_spec.call,
        (f"{tree.alias}.ops.{spec.name}",),
        poison=poison,
        cached=cached,
    )


def make_provider(name: str, spec: OpSpec, dtype: torch.dtype) -> Provider:
    """The provider ``name`` for ``spec`` at ``dtype``: a generic one, or a peer or speed-of-light reference the spec
    declares; raises Unavailable when it cannot run here."""
    if name == "tritonkit":
        return _tritonkit(spec, dtype)
    if name == "eager":
        return _eager(spec, dtype)
    if name in ("inductor", "inductor-dynamic"):
        if spec.not_compilable:
            raise Unavailable(spec.not_compilable)
        return _inductor(spec, dtype, dynamic=name == "inductor-dynamic")
    factory = spec.peers.get(name) or spec.speed_of_light.get(name)
    if factory is not None:
        return _declared(factory, name, spec, dtype)
    known = all_providers()
    if name in known:
        raise Unavailable(f"{spec.name}'s OpSpec declares no {name} peer or speed-of-light reference")
    raise ValueError(f"unknown provider {name!r}; known: {', '.join(known)}")


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
        out[k] = torch.empty(0, dtype=v.dtype, device=v.device).set_(
            storages[key], v.storage_offset(), v.size(), v.stride()
        )
    return out


def check(provider: Provider, spec: OpSpec, dtype: torch.dtype, inputs: dict, oracle: Oracle) -> Check:
    """Run ``provider`` once (its ``check_fn`` where it has one) on a copy of ``inputs`` and compare every output
    with the float64 ``oracle`` (:func:`reference`), on the rows it covers.

    Outputs tritonkit allocates start as NaN, so an element the kernel never writes fails. Exceptions become a
    failed check with the exception as detail; :class:`Inapplicable` from ``prepare`` propagates (a skip).
    """
    tol = spec.tolerance_for(dtype)
    try:
        with poison_outputs(), provider.poison() if provider.poison else contextlib.nullcontext():
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
    comps = {
        name: compare(oracle.select(name, outs[name]), ref, tol, oracle.scales.get(name))
        for name, ref in oracle.refs.items()
    }
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
