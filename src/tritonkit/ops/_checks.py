"""Argument checks shared by the ops' api.py: each error names the argument and what was expected.

Checks read only metadata (dtype, shape, strides, device), never tensor data, so they cost no device sync and work
on ``device="meta"`` tensors and under CUDA-graph capture. The one exception is opt-in: ``index_range`` reads index
values when ``TRITONKIT_CHECK_INDICES=1`` (``indices_checked``), for debugging a caller.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

import torch

from . import _memo
from ..spec import dtype_name
from ._library import FakeTensor, _python_dispatch, through_dispatcher

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)


def _names(dtypes: Iterable[torch.dtype]) -> str:
    return "/".join(dtype_name(d) for d in dtypes)


def tensor(
    name: str, t, *, dtypes=None, ndim: int | None = None, min_ndim: int | None = None, last_contiguous: bool = False
) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {_names(dtypes)}, got {dtype_name(t.dtype)}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s), got shape {tuple(t.shape)}")
    if last_contiguous and t.numel() and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension, got strides {tuple(t.stride())}")
    return t


def inference_only(**tensors) -> None:
    """The ops have no backward: with grad mode on, an input that requires grad would silently lose its graph."""
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise RuntimeError(
                f"{name} requires grad, but tritonkit ops are inference ops with no backward (the "
                f"output would silently drop the autograd graph): call them under torch.no_grad() "
                f"or torch.inference_mode(), or pass {name}.detach()"
            )


def fp8_scale(name: str, s) -> None:
    """A per-tensor fp8 scale argument read on the device: a float32 tensor of one element (a float is refused with
    how to wrap it: reading a float would not be capturable)."""
    if not isinstance(s, torch.Tensor):
        raise TypeError(
            f"{name} must be a float32 tensor of one element (the per-tensor fp8 scale, read on the "
            f"device), got {type(s).__name__}; wrap a float as torch.tensor([s], device=...)"
        )
    if s.dtype != torch.float32:
        raise TypeError(f"{name} must have dtype float32, got {dtype_name(s.dtype)}")
    if s.numel() != 1:
        raise ValueError(f"{name} must have exactly one element (a per-tensor scale), got shape {tuple(s.shape)}")


def same_device(**tensors: torch.Tensor | None) -> torch.device:
    """All given tensors on one device; the op runs there (CUDA, CPU under TRITON_INTERPRET=1, or meta)."""
    items = [(n, t) for n, t in tensors.items() if t is not None]
    dev = items[0][1].device
    for n, t in items[1:]:
        if t.device != dev:
            raise ValueError(f"{n} is on {t.device} but {items[0][0]} is on {dev}; all tensors must share a device")
    return dev


def same_dtype(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.dtype != ref.dtype:
        raise TypeError(f"{name} must have {ref_name}'s dtype {dtype_name(ref.dtype)}, got {dtype_name(t.dtype)}")


def shape_equal(name: str, t: torch.Tensor, expected: tuple, what: str) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)} ({what}), got {tuple(t.shape)}")


def rows(name: str, t: torch.Tensor) -> torch.Tensor:
    """View ``t [..., n]`` as ``[rows, n]``; a copy only when the leading dims cannot be flattened (inputs only)."""
    n = t.shape[-1]
    try:
        return t.view(-1, n)
    except RuntimeError:
        return t.reshape(-1, n)


def rows_and_stride(name: str, t: torch.Tensor, output: bool = False) -> tuple[torch.Tensor, int]:
    """``t`` and its row stride, for a kernel that takes ``[rows, n]`` as a pointer and a row stride: a contiguous
    tensor is passed as it is (a view costs a few µs of host time on every call), anything else through ``rows``.
    An ``output`` must be viewable so (a copy would take the writes): otherwise a ValueError names it."""
    if t.is_contiguous():
        return t, t.shape[-1]
    if output:
        try:
            t2 = t.view(-1, t.shape[-1])
        except RuntimeError:
            raise ValueError(
                f"{name} must be viewable as rows of its last dimension (one stride between rows, "
                f"the last dimension contiguous), got shape {tuple(t.shape)} and strides "
                f"{tuple(t.stride())}"
            ) from None
        return t2, t2.stride(0)
    t2 = rows(name, t)
    return t2, t2.stride(0)


def layout(t) -> tuple | None:
    """Everything a metadata check reads of ``t`` (dtype, shape, strides, device), as a key; None for None. A
    non-tensor is keyed by its type: a check of it raises whatever its value."""
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        return (type(t),)
    return (t.dtype, t.shape, t.stride(), t.device)


class CheckedLayouts:
    """Keys of argument layouts that passed an op's metadata checks, so a repeated call skips them (the checks
    cost an op's host path ~10 us a call; a key ~2 us). A key must hold everything those checks read: the
    :func:`layout` of each tensor, and each scalar with its type (``True == 1`` and ``1 == 1.0`` in a dict). Bounded:
    emptied when full, as a serving loop's varying token counts would otherwise grow it without end. Each key holds a
    value (True unless the op gives one), so an op can keep what else it derives from the layout under one hash."""

    def __init__(self, maxsize: int = 4096):
        self.maxsize = maxsize
        self.keys: dict = {}
        # tritonkit.ops.clear_caches empties it (what it holds derives from config names and kernels)
        _memo.register(self)

    def __contains__(self, key) -> bool:
        return self.get(key) is not None

    def get(self, key):
        """The value added with ``key``, or None (never for a None key, nor one that cannot be hashed: a symbolic
        shape)."""
        if key is None:
            return None
        try:
            return self.keys.get(key)
        except TypeError:
            return None

    def add(self, key, value=True) -> bool:
        """Remember ``key``; False where it cannot be (None, or a key that cannot be hashed)."""
        if key is None:
            return False
        try:
            self.keys[key] = value
        except TypeError:
            return False
        if len(self.keys) > self.maxsize:
            self.keys.clear()
            self.keys[key] = value
        return True

    def clear(self) -> None:
        self.keys.clear()


def hashable_key(make) -> tuple | None:
    """``make()``, or None while torch.compile traces (Dynamo cannot trace ``hash`` of a tuple; a traced call checks
    everything once, at trace time). A key that cannot be hashed (a symbolic shape) is found and kept by no
    :class:`CheckedLayouts`: hashing it once more here would cost every call ~0.5 us."""
    if torch.compiler.is_compiling():
        return None
    return make()


#: ``TRITONKIT_CHECK_INDICES=1``: ops that take indices into their other arguments (topk ids) check their values too
CHECK_INDICES_ENV = "TRITONKIT_CHECK_INDICES"


_ENVIRON = os.environ
# os.environ's own dict and the variable's key in it: ``os.environ.get`` of an unset variable raises and catches a
# KeyError inside, 0.7 us on every call of every op that takes indices
_ENV_DATA, _ENV_KEY = getattr(_ENVIRON, "_data", None), None
if isinstance(_ENV_DATA, dict) and callable(getattr(_ENVIRON, "encodekey", None)):
    _ENV_KEY = _ENVIRON.encodekey(CHECK_INDICES_ENV)
else:
    _ENV_DATA = None


def indices_checked() -> bool:
    """Whether index values are checked (read at each call). Off by default: reading them is a device sync per
    call, which a CUDA graph cannot capture; the ops are written so that no value makes them access out of bounds.
    On, while debugging a caller, a bad id is a ValueError naming it instead of a silently dropped slot."""
    if _ENV_DATA is not None and os.environ is _ENVIRON:
        v = _ENV_DATA.get(_ENV_KEY)
        return v is not None and _ENVIRON.decodevalue(v) not in ("", "0")
    return os.environ.get(CHECK_INDICES_ENV, "0") not in ("", "0")


def _traced(t: torch.Tensor) -> bool:
    """A fake or functional tensor (torch.compile, make_fx): it has no values to read."""
    from torch._subclasses.fake_tensor import is_fake

    return is_fake(t) or torch._is_functional_tensor(t)


def _values_readable(t: torch.Tensor) -> bool:
    """Whether ``t``'s values can be read now: not while torch.compile traces, not on meta or fake tensors, not
    during a CUDA-graph capture (a read is a sync, which a capture forbids: the graph is checked on its eager
    calls)."""
    if torch.compiler.is_compiling() or t.device.type == "meta" or not t.numel() or _traced(t):
        return False
    return not (t.is_cuda and torch.cuda.is_current_stream_capturing())


def _first(bad: torch.Tensor) -> tuple[int, ...] | None:
    if not bool(bad.any()):
        return None
    return tuple(int(i) for i in bad.nonzero()[0])


def index_range(
    name: str,
    t: torch.Tensor,
    high: int,
    what: str,
    low: int | None = 0,
    otherwise: str = "such a slot is dropped",
    used: torch.Tensor | None = None,
) -> None:
    """ValueError naming ``t``'s first value outside ``[low, high)`` (``low=None``: below ``high``), with its
    position (reads ``t``: a sync). ``used``: a mask of ``t``'s shape; entries outside it may hold anything.
    ``otherwise``: what the op does with such a value when the check is off."""
    if not _values_readable(t):
        return
    bad = t >= high if low is None else (t < low) | (t >= high)
    if used is not None:
        bad &= used
    pos = _first(bad)
    if pos is not None:
        span = f"below {high}" if low is None else f"in [{low}, {high})"
        raise ValueError(
            f"{name} must hold {what} {span}, got {int(t[pos])} at {pos} "
            f"({CHECK_INDICES_ENV}=1 checks this; unset, {otherwise})"
        )


def nondecreasing(name: str, t: torch.Tensor, otherwise: str) -> None:
    """ValueError naming the first entry of the 1-d ``t`` below its predecessor (reads ``t``: a sync)."""
    if not _values_readable(t) or t.shape[0] < 2:
        return
    pos = _first(t[1:] < t[:-1])
    if pos is not None:
        i = pos[0] + 1
        raise ValueError(
            f"{name} must be non-decreasing, got {int(t[i])} at ({i},) after {int(t[i - 1])} at "
            f"({i - 1},) ({CHECK_INDICES_ENV}=1 checks this; unset, {otherwise})"
        )


def at_most(name: str, t: torch.Tensor, limit_name: str, limit: int) -> None:
    """ValueError naming ``limit_name`` when an entry of ``t`` (each one ``name``) exceeds ``limit``, with the
    entry and its position (reads ``t``: a sync)."""
    if not _values_readable(t):
        return
    pos = _first(t > limit)
    if pos is not None:
        raise ValueError(
            f"{limit_name} must be at least every {name}: it is {limit}, but the {name} at {pos} is "
            f"{int(t[pos])} ({CHECK_INDICES_ENV}=1 checks this)"
        )


def positive_finite(name: str, t: torch.Tensor, otherwise: str) -> None:
    """ValueError naming the first value of the float tensor ``t`` that is not finite and > 0, with its position
    (reads ``t``: a sync), in the words of the error a float argument gets."""
    if not _values_readable(t):
        return
    pos = _first(~(torch.isfinite(t) & (t > 0)))
    if pos is not None:
        v = float(t[pos])
        raise ValueError(
            f"{name} must be {'> 0' if math.isfinite(v) else 'finite'}, got {v} at {pos} "
            f"({CHECK_INDICES_ENV}=1 checks this; unset, {otherwise})"
        )


# -- outputs that share memory --------------------------------------------------------------------------------------
def _has_memory(out: torch.Tensor) -> bool:
    """Whether data pointers mean something: not a meta or fake tensor, not while tracing or under a dispatch mode
    (functionalization refuses overlapping writes itself). The op's other tensors share out's device (checked
    before) and fake tensors come with a dispatch mode, so ``out`` alone decides; on every call's host path."""
    # through_dispatcher's tests, inlined: this runs a few times per call
    return (
        out.device.type != "meta"
        and not isinstance(out, FakeTensor)
        and not torch.compiler.is_compiling()
        and _python_dispatch._get_current_dispatch_mode() is None
    )


# on every call's host path, and a function of the layout alone: one sort per layout, not per call
@_memo.memoized(maxsize=1024)
def _layout_overlaps(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True unless the layout's elements provably occupy distinct memory (each stride, smallest first, clears the
    span of the dims inside it). Expanded (stride-0) or overlapping views fail; every ordinary view passes."""
    span = 1
    for stride, size in sorted((st, s) for s, st in zip(shape, strides) if s > 1):
        if stride < span:
            return True
        span += stride * (size - 1)
    return False


def overlaps_itself(t: torch.Tensor) -> bool:
    return not t.is_contiguous() and _layout_overlaps(tuple(t.shape), t.stride())


def distinct_elements(name: str, t: torch.Tensor, why: str = "it is written") -> None:
    """ValueError unless every element of the output ``t`` has memory of its own (no expanded or stride-0 view),
    which a write through it needs: two elements on one address would race."""
    if t is not None and not t.is_contiguous() and t.numel() > 1 and _has_memory(t) and overlaps_itself(t):
        raise ValueError(
            f"{name} must not have elements that share memory (an expanded, stride-0 or overlapping "
            f"view; {why}), got shape {tuple(t.shape)} and strides {tuple(t.stride())}"
        )


def _extent(t: torch.Tensor) -> int:
    """Bytes from ``t``'s first element to one past its last."""
    if t.is_contiguous():
        return t.numel() * t.element_size()
    return (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    lo = t.data_ptr()
    return lo, lo + _extent(t)


def may_overlap(a: torch.Tensor, b: torch.Tensor, a_span: tuple[int, int] | None = None) -> bool:
    """Whether some byte of ``a`` may also be a byte of ``b``. Exact for views of one buffer that share their
    leading stride and keep each leading index's elements inside one such stride (a fused qkv row, a joint
    ``[num_blocks, 2, ...]`` KV cache), where the spans interleave but the pieces do not; otherwise by whole spans
    (conservative). ``a_span``: ``a``'s byte span, when the caller has it."""
    (a_lo, a_hi), (b_lo, b_hi) = a_span or _byte_span(a), _byte_span(b)
    if a_hi <= b_lo or b_hi <= a_lo:
        return False
    row = a.stride(0) * a.element_size() if a.dim() else 0
    if b.dim() == 0 or b.stride(0) * b.element_size() != row or row <= 0:
        return True
    a_w = a_hi - a_lo - (a.shape[0] - 1) * row  # one leading index's footprint
    b_w = b_hi - b_lo - (b.shape[0] - 1) * row
    if a_w > row or b_w > row:
        return True
    # per-index pieces on a circle of one row: disjoint arcs never share a byte
    d = (b_lo - a_lo) % row
    return d < a_w or row - d < b_w


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``a`` and ``b`` are the same elements (exact in place): one address, shape, strides and dtype."""
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype


def no_overlap(
    out_name: str, out: torch.Tensor | None, in_place_ok: bool = False, *, extents: tuple | None = None, **others
) -> None:
    """ValueError naming ``out_name`` and the first of ``others`` (tensors or None) it shares memory with: the
    kernel writes ``out`` while it reads (or writes) them. ``in_place_ok``: ``out`` may be exactly one of them
    (the same view), where the op reads each element before it writes it. ``extents``: :func:`extents` of ``out``
    and ``others`` in that order, where the caller keeps them per layout (a call then reads data pointers alone)."""
    if out is None or not out.numel() or not _has_memory(out):
        return
    if extents is None:
        span = lo, hi = _byte_span(out)
    else:
        lo = out.data_ptr()
        span = lo, hi = lo, lo + extents[0]
        # the extents known, most calls end here: separate allocations, ruled out by their data pointers alone
        for t, size in zip(others.values(), extents[1:]):
            if size:
                p = t.data_ptr()
                if p < hi and lo < p + size:
                    break
        else:
            return
    for name, t in others.items():
        # most calls: separate allocations, ruled out by the two ends alone
        if not isinstance(t, torch.Tensor):
            continue
        p = t.data_ptr()
        if p >= hi or p + _extent(t) <= lo or not t.numel():
            continue
        if in_place_ok and same_view(out, t):
            continue
        if may_overlap(out, t, span):
            raise ValueError(
                f"{out_name} must not overlap {name} (the kernel writes {out_name} while it reads "
                f"{name}){'; exactly in place is allowed' if in_place_ok else ''}"
            )


def extents(*tensors) -> tuple[int, ...]:
    """Each tensor's bytes from its first element to one past its last (0 for None, a non-tensor or an empty
    tensor): a function of the layout, which an op may keep per checked layout for :func:`no_overlap`."""
    return tuple(_extent(t) if isinstance(t, torch.Tensor) and t.numel() else 0 for t in tensors)


def distinct_outputs(**outs: torch.Tensor) -> None:
    """Output buffers a form copies into one after another: each must have one element per memory location (no
    ``expand``), and no two may share memory, or a later copy would fail (or silently overwrite) after an earlier
    one has written."""
    items = list(outs.items())
    for i, (name, t) in enumerate(items):
        if not through_dispatcher(t):
            distinct_elements(name, t, "a copy into it would fail")
            no_overlap(name, t, **dict(items[:i]))
