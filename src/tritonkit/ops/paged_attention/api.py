"""paged_attention: varlen attention over a paged KV cache, for decode and prefill (vLLM / flash-attn layout)."""

from __future__ import annotations

import math
import numbers
from operator import itemgetter
from typing import NamedTuple

import torch

from .. import _alloc, _checks, _device, _memo
from .. import _launch as _launch_mod
from .._ints import cdiv
from .._launch import Step, launch
from .._library import op_with_outputs, through_dispatcher
from . import config
from .kernel import (
    _paged_attention_decode_kernel,
    _paged_attention_merge_kernel,
    _paged_attention_prefill_kernel,
    _paged_attention_prefill_merge_kernel,
)
from .replay import CALL_SLOTS, COUNTER_SLOT, Layout, Replay, scratch, tile_counter, unused_counter

LOG2E = 1.4426950408889634
Q_DTYPES = (torch.float16, torch.bfloat16)
FP8_DTYPE = torch.float8_e4m3fn
# grid[1] holds KV heads (query heads in the merge): bounded by the model, but not past CUDA's limit
MAX_GRID_YZ = 65535
MAX_HEAD_DIM = 256

# a call's tensors by slot: the ten the caller passes (out included), then the decode and the prefill split scratch;
# each launch takes its leading tensors from these slots (replay.Replay repeats the launches with a call's own)
_DECODE_FRONT = itemgetter(0, 1, 2, 3, 10, 11, 12, 4, 5, 6, 7, 8, 9)
_DECODE_MERGE_FRONT = itemgetter(3, 10, 11, 12, 4, 7, 9)
_PREFILL_FRONT = itemgetter(0, 1, 2, 3, 13, 14, 15, 4, 5, 6, 7, 8, 9)
_PREFILL_MERGE_FRONT = itemgetter(3, 13, 14, 15, 4, 7, 9)


_new_record = tuple.__new__


class Args(NamedTuple):
    """A call's arguments as check_args accepted them: the ten tensors a call's launches take their leading pointers
    from (``out`` is allocated before the record is made; k_scale/v_scale are one-element float32 tensors or None),
    then the scalars, resolved (softmax_scale's default, the window's sides). Every function past check_args takes
    this record, never the argument list."""

    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    out: torch.Tensor | None
    cu_seqlens_q: torch.Tensor
    seqused_k: torch.Tensor
    block_table: torch.Tensor
    sinks: torch.Tensor | None
    k_scale: torch.Tensor | None
    v_scale: torch.Tensor | None
    max_seqlen_q: int
    max_seqlen_k: int
    scale: float
    causal: bool
    window_left: int
    window_right: int
    softcap: float


def _launch(a: Args, record: Layout | None = None) -> None:
    """Launch the call's kernels; with ``record`` (check_args' memo entry of this layout), keep them there for
    later calls where the fast path holds every one of them (and api's ``launch`` is the real one)."""
    steps, scratch_sizes = _steps(a)
    if not steps:
        return
    dev = a.q.device
    # the record's first ten fields are the call's slots
    # one counter a call: a second launch taking tiles from it would find it spent
    dynamic = sum(bool(s.constexprs.get("DYNAMIC")) for s in steps)
    assert dynamic <= 1, "at most one launch a call takes tiles from the counter"
    counter = dynamic == 1
    slots = (
        a[:CALL_SLOTS]
        + scratch(scratch_sizes[0], dev)
        + scratch(scratch_sizes[1], dev)
        + (tile_counter(dev) if counter else unused_counter(dev),)
    )
    bounds = tuple(
        launch(
            s.kernel, s.grid, s.front(slots) + s.tail, s.constexprs, s.num_warps, s.num_stages,
            launch_pdl=s.pdl, front=s.n_front,
        )
        for s in steps
    )  # fmt: skip
    if record is not None and launch is _launch_mod.launch and all(type(b) is _launch_mod.Bound for b in bounds):
        record.replay = Replay(bounds, tuple(s.front for s in steps), scratch_sizes, dev, slots, counter)


def _steps(a: Args) -> tuple[list[Step], tuple]:
    """The call's launches and the sizes of its decode and prefill split scratch (None: none), from metadata and
    scalars alone (nothing here reads a data pointer)."""
    q, k_cache, v_cache, out, block_table = a.q, a.k_cache, a.v_cache, a.out, a.block_table
    num_tokens, num_heads, head_dim = q.shape
    num_seqs = a.seqused_k.shape[0]
    if num_tokens == 0 or num_seqs == 0:
        return [], (None, None)
    num_kv_heads = k_cache.shape[2]
    group = num_heads // num_kv_heads
    kv_fp8 = k_cache.dtype == FP8_DTYPE
    # flash-attn semantics: causal is the window (left, 0); -1 is an unbounded side
    limit_right = a.causal or a.window_right >= 0
    limit_left = a.window_left >= 0
    # a side past every key a row can reach is no limit; clamped, no int32 position sum in the kernels overflows: a
    # key lies at most num_tokens - 1 after its row's position and at most bt_width * block_size - 1 before it
    win_right = 0 if a.causal else min(max(a.window_right, 0), num_tokens)
    win_left = min(max(a.window_left, 0), block_table.shape[1] * k_cache.shape[1])
    use_softcap = a.softcap > 0
    qk_scale = a.scale * LOG2E
    softcap_in = a.scale / a.softcap if use_softcap else 0.0
    softcap_out = a.softcap * LOG2E
    features = dict(
        LIMIT_LEFT=limit_left, LIMIT_RIGHT=limit_right, SOFTCAP=use_softcap, SINKS=a.sinks is not None, KV_FP8=kv_fp8
    )
    common = (
        win_left,
        win_right,
        qk_scale,
        softcap_in,
        softcap_out,
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_table.stride(0),
    )

    cap = _device.capability(q.device)
    plan = config.launch_plan(
        group,
        head_dim,
        k_cache.element_size(),
        num_seqs,
        num_tokens,
        num_kv_heads,
        a.max_seqlen_q,
        config.max_keys_needed(a.max_seqlen_q, a.max_seqlen_k, a.window_left),
        config.num_sms(q.device),
        _hopper_ok(a, group, cap),
        cap == (9, 0),
    )
    steps: list[Step] = []
    dec_scratch = pre_scratch = None
    # a property of the device, not of the call: the decode kernel's trigger stays one specialization whether or
    # not this call has splits (the trigger is a no-op without a dependent launch)
    pdl = config.merge_pdl(q.device)
    if plan.decode is not None:
        dec_scratch = _decode_steps(steps, a, plan.decode, pdl, common, features)
    if plan.prefill is not None:
        pre_scratch = _prefill_steps(steps, a, plan.prefill, plan.prefill_skips_q, pdl, common, features)
    return steps, (dec_scratch, pre_scratch)


def _hopper_ok(a: Args, group: int, cap: tuple[int, int] | None) -> bool:
    """Whether the call may take kernel_hopper's prefill kernel: config.prefill_hopper_fits, a bf16/fp16 cache of
    q's dtype, and caches TMA can read as 2D ``[num_blocks * block_size, num_kv_heads * head_dim]`` rows (heads and
    head_dim contiguous, pages evenly strided, 16-byte aligned rows and base)."""
    # meta tensors: the checker's and the resource report's target (never the interpreter's CPU tensors)
    if not config.PREFILL_HOPPER or a.q.device.type not in ("cuda", "meta"):
        return False
    k, v = a.k_cache, a.v_cache
    num_blocks, block_size, num_kv_heads, head_dim = k.shape
    if k.dtype != a.q.dtype or v.dtype != a.q.dtype:
        return False
    if not config.prefill_hopper_fits(cap, head_dim, block_size, group, num_blocks * block_size):
        return False
    row = num_kv_heads * head_dim
    return all(
        c.stride(3) == 1
        and c.stride(2) == head_dim
        and c.stride(1) >= row
        and c.stride(0) == block_size * c.stride(1)
        and c.stride(1) * c.element_size() % 16 == 0
        and c.data_ptr() % 16 == 0
        for c in (k, v)
    )


@_memo.memoized(maxsize=64)
def _kv_box_layout(rows: int, head_dim: int, dtype: torch.dtype):
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout.get_default_for(
        [rows, head_dim], gl.bfloat16 if dtype == torch.bfloat16 else gl.float16
    )


def _kv_descriptor(cache: torch.Tensor, rows: int):
    """TMA descriptor of a paged cache as ``[num_blocks * block_size, num_kv_heads * head_dim]`` rows, a box of
    ``rows`` keys x head_dim (kernel_hopper)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    num_blocks, block_size, num_kv_heads, head_dim = cache.shape
    return TensorDescriptor(
        cache,
        [num_blocks * block_size, num_kv_heads * head_dim],
        [cache.stride(1), 1],
        [rows, head_dim],
        _kv_box_layout(rows, head_dim, cache.dtype),
    )


_HOPPER_PICK = itemgetter(*_PREFILL_FRONT(range(COUNTER_SLOT))[:11], COUNTER_SLOT)


class _HopperFront:
    """The Hopper prefill kernel's leading arguments from a call's slots: _PREFILL_FRONT's first eleven, with the two
    caches (positions 1 and 2, call slots 1 and 2) as TMA descriptors of ``rows``-key boxes, then the tile counter.
    A repeat (replay.Replay) picks the other ten from its pointers and builds the descriptors from the call's
    caches."""

    __slots__ = ("rows", "made")
    pick = _HOPPER_PICK
    #: (position in the front, call slot) of each descriptor argument
    descriptors = ((1, 1), (2, 2))

    def __init__(self, rows: int):
        self.rows, self.made = rows, {}

    def __call__(self, slots) -> tuple:
        q, k, v, out, part_acc, part_m, part_l, cu, used, bt, sinks, ctr = _HOPPER_PICK(slots)
        kd, vd = _kv_descriptor(k, self.rows), _kv_descriptor(v, self.rows)
        # each descriptor's class and fields but its base: a memoized layout must not keep the caches alive
        self.made = {slot: (type(d), {**d.__dict__, "base": None}) for slot, d in ((1, kd), (2, vd))}
        return (q, kd, vd, out, part_acc, part_m, part_l, cu, used, bt, sinks, ctr)

    def descriptor(self, slot: int, cache: torch.Tensor):
        """The descriptor of call slot ``slot`` over ``cache``, a cache of the layout this front was first called
        with (the replay's key): that call's descriptor with ``cache`` as its base. Its checks (16-byte aligned base
        and strides) held then; the replay checks each call's alignment class."""
        cls, fields = self.made[slot]
        d = object.__new__(cls)
        d.__dict__ = {**fields, "base": cache}
        return d


def _decode_steps(steps: list, a: Args, dec, pdl: bool, common: tuple, features: dict) -> tuple | None:
    """The decode kernel over the sequences a decode program holds, and the merge of its KV splits (a programmatic
    dependent launch with ``pdl``); returns the split scratch's sizes (accumulator and row elements; None with one
    split)."""
    q, k_cache, block_table, sinks = a.q, a.k_cache, a.block_table, a.sinks
    num_seqs = a.seqused_k.shape[0]
    num_tokens, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    d_pad = config.head_dim_pad(head_dim)
    steps.append(
        Step(
            _paged_attention_decode_kernel,
            (num_seqs, num_kv_heads, dec.num_splits),
            _DECODE_FRONT,
            13,
            (dec.num_splits, dec.tiles_per_split, block_table.shape[1], num_tokens, k_cache.shape[0], *common),
            {
                "GROUP": group,
                "HEAD_DIM": head_dim,
                "HEAD_DIM_PAD": d_pad,
                "BLOCK_M": dec.block_m,
                "BLOCK_N": dec.block_n,
                "BLOCK_SIZE": block_size,
                "MAX_Q": dec.max_q,
                **features,
                "KEY_WARPS": dec.key_warps,
                "PDL_TRIGGER": pdl,
            },
            dec.num_warps,
            dec.num_stages,
        )
    )
    if dec.num_splits == 1:
        # the kernel writes out directly
        return None
    # a program a query token: a decode sequence has at most dec.max_q (<= DECODE_WIDE_ROWS, within grid[2]'s 65535)
    # and, by the caller's contract, at most max_seqlen_q (1 at plain decode: no program a row cannot use)
    tokens = max(1, min(dec.max_q, a.max_seqlen_q))
    steps.append(
        Step(
            _paged_attention_merge_kernel,
            (num_seqs, num_heads, tokens),
            _DECODE_MERGE_FRONT,
            7,
            (dec.num_splits, num_tokens, common[7], common[8]),
            {
                "GROUP": group,
                "HEAD_DIM": head_dim,
                "HEAD_DIM_PAD": d_pad,
                "BLOCK_M": dec.block_m,
                "MAX_Q": dec.max_q,
                "MAX_SPLITS": config.MAX_SPLITS,
                "SINKS": sinks is not None,
                "KV_FP8": features["KV_FP8"],
                "PDL": pdl,
            },
            config.merge_warps(head_dim),
            pdl=pdl,
        )
    )
    rows = num_seqs * num_kv_heads * dec.block_m * dec.num_splits
    return rows * head_dim, rows


def _prefill_steps(
    steps: list, a: Args, pre, decode_max_q: int, pdl: bool, common: tuple, features: dict
) -> tuple | None:
    """The prefill kernel over the sequences longer than ``decode_max_q`` tokens (0: all of them), with its KV
    splits and their merge (a programmatic dependent launch with ``pdl``) where the batch's query tiles cannot fill
    the card; returns the split scratch's sizes (None without splits)."""
    q, k_cache, block_table, sinks = a.q, a.k_cache, a.block_table, a.sinks
    num_seqs = a.seqused_k.shape[0]
    num_tokens, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    d_pad = config.head_dim_pad(head_dim)
    programs = config.prefill_grid_tiles(num_seqs, num_tokens, pre.block_q) * num_kv_heads
    split = pre.num_splits > 1
    tile = {"GROUP": group, "HEAD_DIM": head_dim, "HEAD_DIM_PAD": d_pad, "BLOCK_M": pre.block_m, "BLOCK_Q": pre.block_q}
    head = (num_seqs, num_kv_heads, block_table.shape[1], num_tokens, k_cache.shape[0])
    tail = (pre.num_splits, decode_max_q)
    constexprs = {**tile, "BLOCK_N": pre.block_n, "BLOCK_SIZE": block_size, **features, "SPLIT": split}
    if pre.hopper:
        steps.append(_hopper_prefill_step(pre, programs, head + common[:9] + common[15:] + tail, constexprs))
    else:
        steps.append(
            Step(
                _paged_attention_prefill_kernel,
                (programs, pre.num_splits),
                _PREFILL_FRONT,
                13,
                head + common + tail,
                constexprs,
                pre.num_warps,
                pre.num_stages,
            )
        )
    if not split:
        return None
    # a program a slice of merge_rows query rows of each prefill program: block_q x group <= block_m rows, at most
    # max(256, group) <= num_heads past 256, so within grid[1]'s 65535
    merge_rows = config.prefill_merge_rows(pre.num_splits)
    # the row-slice merge launches after the prefill grid, as measured (config.PREFILL_MERGE_PARALLEL_SPLITS)
    merge_pdl = pdl and merge_rows == 1
    steps.append(
        Step(
            _paged_attention_prefill_merge_kernel,
            (programs, cdiv(pre.block_q * group, merge_rows)),
            _PREFILL_MERGE_FRONT,
            7,
            (num_seqs, num_kv_heads, pre.num_splits, num_tokens, decode_max_q, common[7], common[8]),
            {
                **tile,
                "MAX_SPLITS": config.MAX_SPLITS,
                "ROWS": merge_rows,
                "SINKS": sinks is not None,
                "KV_FP8": features["KV_FP8"],
                "PDL": merge_pdl,
            },
            config.merge_warps(head_dim) if merge_rows == 1 else config.PREFILL_MERGE_ROWS_WARPS,
            pdl=merge_pdl,
        )
    )
    rows = programs * pre.num_splits * pre.block_m
    return rows * head_dim, rows


def _hopper_prefill_step(pre, programs: int, args: tuple, constexprs: dict) -> Step:
    """kernel_hopper's warp-specialized prefill kernel (sm_90; _hopper_ok held) on kernel.py's prefill arguments
    without the caches' strides (``args``: common's 0-8 and 15; the descriptors hold the rest) and constexprs
    without the padded head_dim and the fp8 flag (neither applies), K/V as TMA descriptors (_HopperFront). With
    ``pre.persistent`` the ``programs`` x splits program tiles run on at most that many programs."""
    from .kernel_hopper import _paged_attention_prefill_hopper_kernel

    rows = config.page_rows(constexprs["BLOCK_SIZE"])
    drop = ("HEAD_DIM_PAD", "KV_FP8")
    tiles = programs * pre.num_splits
    return Step(
        _paged_attention_prefill_hopper_kernel,
        (min(tiles, pre.persistent), 1) if pre.persistent else (programs, pre.num_splits),
        _HopperFront(rows),
        12,
        (*args, tiles, programs),
        {
            **{k: v for k, v in constexprs.items() if k not in drop},
            "PAGE_ROWS": rows,
            "STAGES": pre.num_stages,
            "OVERLAP": config.PREFILL_HOPPER_OVERLAP,
            "PINGPONG": config.PREFILL_HOPPER_PINGPONG,
            "TURNS": config.PREFILL_HOPPER_TURNS,
            "EARLY_PAGES": config.PREFILL_HOPPER_EARLY_PAGES,
            "PERSISTENT": pre.persistent > 0,
            "HANDOFF": pre.persistent > 0 and (config.PREFILL_HOPPER_HANDOFF or config.PREFILL_HOPPER_DYNAMIC),
            "DYNAMIC": pre.persistent > 0 and config.PREFILL_HOPPER_DYNAMIC,
        },
        # PINGPONG: the launch's warps are the first warpgroup's (the second and the load warp are workers)
        pre.num_warps // 2 if config.PREFILL_HOPPER_PINGPONG else pre.num_warps,
    )


def forward(a: Args, layout: Layout | None = None) -> torch.Tensor:
    """The op's named surface: launch on a record check_args returned, into ``a.out`` (allocated when None; a given
    one may not alias the inputs). ``layout`` is check_args' memo entry for exactly these arguments, where this call
    records its launches for later calls to repeat."""
    if a.out is None:
        a = a._replace(out=_alloc.empty(a.q.shape, a.q.dtype, a.q.device))
    _launch(a, layout)
    return a.out


def _alloc_out(q: torch.Tensor, *rest) -> torch.Tensor:
    return _alloc.empty(q.shape, q.dtype, q.device)


@op_with_outputs("paged_attention", _alloc_out)
def _paged_attention_out_op(
    out: torch.Tensor,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seqused_k: torch.Tensor,
    block_table: torch.Tensor,
    sinks: torch.Tensor | None,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
    scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
) -> None:
    # the dispatcher's form of a record: its fields in order, out first
    _launch(
        Args(q, k_cache, v_cache, out, cu_seqlens_q, seqused_k, block_table, sinks, k_scale, v_scale,
             max_seqlen_q, max_seqlen_k, scale, causal, window_left, window_right, softcap)
    )  # fmt: skip


def _int(name: str, v, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, torch.SymInt)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


def _real(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(v).__name__}")
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return v


def _scale_tensor(name: str, s, device: torch.device) -> torch.Tensor:
    if isinstance(s, torch.Tensor):
        if s.dtype != torch.float32:
            raise TypeError(f"{name} must be a float32 tensor (or a float), got {_checks.dtype_name(s.dtype)}")
        if s.numel() != 1:
            raise ValueError(f"{name} must hold one per-tensor scale, got shape {tuple(s.shape)}")
        return s.reshape(1)
    v = _real(name, s)
    if not v > 0:
        raise ValueError(f"{name} must be > 0, got {v}")
    # a device fill, not a host-to-device copy: fine under CUDA-graph capture
    return torch.full((1,), v, dtype=torch.float32, device=device)


def check_args(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    cu_seqlens_q: torch.Tensor,
    seqused_k: torch.Tensor,
    block_table: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float | None = None,
    causal: bool = True,
    window_size=(-1, -1),
    softcap: float = 0.0,
    sinks: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    k_scale=None,
    v_scale=None,
) -> Args:
    """The op's named surface: paged_attention's arguments checked on metadata alone (no device sync), a ValueError
    or TypeError naming the bad one, nothing written; returns the call's record (``out`` as given, None included),
    which :func:`forward` launches on. A layout that passed before skips the metadata checks (_CHECKED)."""
    return _checked(
        q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, max_seqlen_q, max_seqlen_k, softmax_scale,
        causal, window_size, softcap, sinks, out, k_scale, v_scale, False,
    )[0]  # fmt: skip


def _checked(
    q,
    k_cache,
    v_cache,
    cu_seqlens_q,
    seqused_k,
    block_table,
    max_seqlen_q,
    max_seqlen_k,
    softmax_scale,
    causal,
    window_size,
    softcap,
    sinks,
    out,
    k_scale,
    v_scale,
    allocate: bool,
) -> tuple[Args, Layout | None]:
    """check_args: the call's record (with a fresh ``out`` where ``allocate`` and none was given) and the memo entry
    of its layout (None where it has no key: symbolic shapes, torch.compile tracing). Each check below takes the
    arguments it reads, not the list."""
    _checks.inference_only(q=q, k_cache=k_cache, v_cache=v_cache, sinks=sinks, out=out)
    key = _checks.hashable_key(
        lambda: (
            _checks.layout(q),
            _checks.layout(k_cache),
            _checks.layout(v_cache),
            _checks.layout(cu_seqlens_q),
            _checks.layout(seqused_k),
            _checks.layout(block_table),
            type(max_seqlen_q),
            max_seqlen_q,
            type(max_seqlen_k),
            max_seqlen_k,
            type(softmax_scale),
            softmax_scale,
            type(causal),
            causal,
            type(window_size),
            _items_key(window_size),
            type(softcap),
            softcap,
            _checks.layout(sinks),
            _checks.layout(out),
            _checks.layout(k_scale),
            _checks.layout(v_scale),
        )
    )
    layout = _CHECKED.get(key)
    if layout is None:
        _check_cache(q, k_cache, v_cache)
        _check_batch(q, k_cache, cu_seqlens_q, seqused_k, block_table, max_seqlen_q, max_seqlen_k)
        scalars = _check_scalars(q, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_size, softcap)
        _check_extras(q, k_cache, sinks, out, k_scale, v_scale)
        _checks.same_device(
            q=q,
            k_cache=k_cache,
            v_cache=v_cache,
            cu_seqlens_q=cu_seqlens_q,
            seqused_k=seqused_k,
            block_table=block_table,
            sinks=sinks,
            out=out,
            k_scale=k_scale if isinstance(k_scale, torch.Tensor) else None,
            v_scale=v_scale if isinstance(v_scale, torch.Tensor) else None,
        )
        if key is not None:
            # out's and the inputs' extents, in the order the overlap test below names them
            layout = Layout(
                _checks.extents(
                    out, q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, sinks, k_scale, v_scale
                ),
                scalars,
            )
            if not _CHECKED.add(key, layout):
                layout = None
    else:
        scalars = layout.scalars
    # data pointers and index values, every call: the kernels write out while reading everything else, so no
    # element twice and no shared memory (a fresh output shares none)
    if out is not None:
        _checks.distinct_elements("out", out)
        _checks.no_overlap(
            "out",
            out,
            extents=None if layout is None else layout.extents,
            q=q,
            k_cache=k_cache,
            v_cache=v_cache,
            cu_seqlens_q=cu_seqlens_q,
            seqused_k=seqused_k,
            block_table=block_table,
            sinks=sinks,
            k_scale=k_scale,
            v_scale=v_scale,
        )
    elif allocate:
        out = _alloc.empty(q.shape, q.dtype, q.device)
    if _checks.indices_checked():
        _check_indices(
            cu_seqlens_q, seqused_k, block_table, q.shape[0], k_cache.shape[0], k_cache.shape[1], max_seqlen_q
        )
        _check_scales(k_scale, v_scale)
    if k_scale is not None:
        k_scale = _scale_tensor("k_scale", k_scale, q.device)
        v_scale = _scale_tensor("v_scale", v_scale, q.device)
    # tuple.__new__, not Args(...): the record is made on every call's host path (0.3 against 0.5 us)
    tensors = (q, k_cache, v_cache, out, cu_seqlens_q, seqused_k, block_table, sinks, k_scale, v_scale)
    return _new_record(Args, tensors + scalars), layout


def _items_key(w):
    """A pair's (or any sequence's) items with their types, as the layout key holds scalars; anything else as it is
    (a generator over a pair costs 0.4 us a call, its two items spelled out 0.1)."""
    if type(w) is tuple and len(w) == 2:
        a, b = w
        return (type(a), a), (type(b), b)
    return tuple((type(x), x) for x in w) if isinstance(w, (tuple, list)) else w


# layouts (and scalars) check_args accepted; a key of every argument it reads, data pointers and values aside
# (10 -> 7 us a call on a CPU: docs/notes/paged-attention-host.md), each holding the resolved scalars and the
# launches a call recorded; tritonkit.ops.clear_caches empties it
_CHECKED = _checks.CheckedLayouts()


def _check_cache(q, k_cache, v_cache) -> None:
    """q and the two caches: dtypes, ranks, shapes that agree."""
    _checks.tensor("q", q, dtypes=Q_DTYPES, ndim=3, last_contiguous=True)
    num_tokens, num_heads, head_dim = q.shape
    _checks.tensor("k_cache", k_cache, ndim=4, last_contiguous=True)
    _checks.tensor("v_cache", v_cache, ndim=4, last_contiguous=True)
    if k_cache.dtype not in (q.dtype, FP8_DTYPE):
        raise TypeError(
            f"k_cache must have q's dtype {_checks.dtype_name(q.dtype)} or float8_e4m3fn, "
            f"got {_checks.dtype_name(k_cache.dtype)}"
        )
    _checks.same_dtype("v_cache", v_cache, "k_cache", k_cache)
    _checks.shape_equal(
        "v_cache", v_cache, tuple(k_cache.shape), "k_cache's [num_blocks, block_size, num_kv_heads, head_dim]"
    )
    num_blocks, block_size, num_kv_heads, cache_head_dim = k_cache.shape
    if cache_head_dim != head_dim:
        raise ValueError(
            f"k_cache head_dim {cache_head_dim} must equal q's head_dim {head_dim} "
            f"(caches are [num_blocks, block_size, num_kv_heads, head_dim])"
        )
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"q's head_dim must be in [1, {MAX_HEAD_DIM}], got {head_dim}")
    if num_blocks < 1 or block_size < 1 or num_kv_heads < 1:
        raise ValueError(
            f"k_cache must have num_blocks >= 1, block_size >= 1 and num_kv_heads >= 1, got shape "
            f"{tuple(k_cache.shape)}"
        )
    if num_heads < 1:
        raise ValueError(f"q must have at least one head, got shape {tuple(q.shape)}")
    if num_heads % num_kv_heads:
        raise ValueError(f"q's num_heads {num_heads} must be a multiple of k_cache's num_kv_heads {num_kv_heads}")
    if num_heads > MAX_GRID_YZ:
        raise ValueError(f"q's num_heads must be at most {MAX_GRID_YZ}, got {num_heads}")


def _check_batch(q, k_cache, cu_seqlens_q, seqused_k, block_table, max_seqlen_q, max_seqlen_k) -> None:
    """The batch's index tensors and bounds, on metadata: dtypes, lengths, the block table's width."""
    # the kernels index these with stride 1: a strided view would read the wrong sequences
    _checks.tensor("seqused_k", seqused_k, dtypes=(torch.int32,), ndim=1, last_contiguous=True)
    num_seqs = seqused_k.shape[0]
    _checks.tensor("cu_seqlens_q", cu_seqlens_q, dtypes=(torch.int32,), ndim=1, last_contiguous=True)
    if cu_seqlens_q.shape[0] != num_seqs + 1:
        raise ValueError(
            f"cu_seqlens_q must have num_seqs + 1 = {num_seqs + 1} entries (num_seqs = "
            f"len(seqused_k)), got shape {tuple(cu_seqlens_q.shape)}"
        )
    _checks.tensor("block_table", block_table, dtypes=(torch.int32,), ndim=2, last_contiguous=True)
    if block_table.shape[0] != num_seqs:
        raise ValueError(
            f"block_table must have num_seqs = {num_seqs} rows (num_seqs = len(seqused_k)), "
            f"got shape {tuple(block_table.shape)}"
        )
    _int("max_seqlen_q", max_seqlen_q, 0)
    _int("max_seqlen_k", max_seqlen_k, 0)
    block_size = k_cache.shape[1]
    if block_table.shape[1] * block_size < max_seqlen_k:
        raise ValueError(
            f"block_table is too narrow for max_seqlen_k {max_seqlen_k}: {block_table.shape[1]} "
            f"blocks x block_size {block_size} = {block_table.shape[1] * block_size} keys"
        )


def _check_scalars(q, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_size, softcap) -> tuple:
    """The scalars checked and resolved, in Args' order from max_seqlen_q: softmax_scale's default ``D ** -0.5``,
    the window's two sides as ints."""
    if softmax_scale is not None and not _real("softmax_scale", softmax_scale) > 0:
        raise ValueError(f"softmax_scale must be > 0, got {softmax_scale}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if (
        not isinstance(window_size, (tuple, list))
        or len(window_size) != 2
        or any(isinstance(w, bool) or not isinstance(w, int) for w in window_size)
    ):
        raise TypeError(
            f"window_size must be a pair of ints (left, right), -1 for an unbounded side ((-1, -1): no window), "
            f"got {window_size!r}"
        )
    if any(w < -1 for w in window_size):
        raise ValueError(f"window_size sides must be >= 0, or -1 for unbounded, got {tuple(window_size)}")
    if not _real("softcap", softcap) >= 0:
        raise ValueError(f"softcap must be >= 0 (0 disables it), got {softcap}")
    scale = float(softmax_scale) if softmax_scale is not None else q.shape[-1] ** -0.5
    return (
        max_seqlen_q,
        max_seqlen_k,
        scale,
        causal,
        int(window_size[0]),
        int(window_size[1]),
        float(softcap),
    )


def _check_extras(q, k_cache, sinks, out, k_scale, v_scale) -> None:
    """The optional tensors: sinks, a given out, the fp8 scales a float8 cache needs (and only it)."""
    num_tokens, num_heads, head_dim = q.shape
    if sinks is not None:
        _checks.tensor("sinks", sinks, dtypes=(torch.float32,), ndim=1, last_contiguous=True)
        _checks.shape_equal("sinks", sinks, (num_heads,), "one logit per query head")
    if out is not None:
        _checks.tensor("out", out, ndim=3, last_contiguous=True)
        _checks.same_dtype("out", out, "q", q)
        _checks.shape_equal("out", out, (num_tokens, num_heads, head_dim), "q's shape")
    fp8 = k_cache.dtype == FP8_DTYPE
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if fp8 and s is None:
            raise ValueError(f"{name} is required with a float8_e4m3fn cache (the cache holds value / scale)")
        if not fp8 and s is not None:
            raise ValueError(
                f"{name} applies only to a float8_e4m3fn cache; k_cache is {_checks.dtype_name(k_cache.dtype)}"
            )


def _check_indices(
    cu_seqlens_q, seqused_k, block_table, num_tokens: int, num_blocks: int, block_size: int, max_seqlen_q: int
) -> None:
    """``TRITONKIT_CHECK_INDICES=1``: the index inputs' values (a device sync), each error naming the argument, the
    first bad value and its position; off, the kernels drop what these would refuse, inside the tensors' bounds."""
    _checks.index_range(
        "cu_seqlens_q",
        cu_seqlens_q,
        num_tokens + 1,
        f"token offsets into q ({num_tokens} tokens)",
        otherwise="a sequence whose rows fall outside q is not computed",
    )
    _checks.nondecreasing("cu_seqlens_q", cu_seqlens_q, otherwise="a sequence of negative length is not computed")
    _checks.at_most(
        "query length (cu_seqlens_q[s + 1] - cu_seqlens_q[s])",
        cu_seqlens_q[1:] - cu_seqlens_q[:-1],
        "max_seqlen_q",
        max_seqlen_q,
    )
    width = block_table.shape[1]
    _checks.index_range(
        "seqused_k",
        seqused_k,
        width * block_size + 1,
        f"key counts (block_table's {width} blocks x block_size {block_size} hold {width * block_size})",
        otherwise="that sequence sees no key",
    )
    # only the entries that hold a sequence's keys: the rest of a row is never read
    blocks = (seqused_k.to(torch.int64) + block_size - 1) // block_size
    used = torch.arange(width, device=block_table.device)[None, :] < blocks[:, None]
    _checks.index_range(
        "block_table",
        block_table,
        num_blocks,
        f"block ids of k_cache's {num_blocks} blocks",
        otherwise="such an id reads block 0",
        used=used,
    )


def _check_scales(k_scale, v_scale) -> None:
    """``TRITONKIT_CHECK_INDICES=1``: a scale tensor's value (a device sync), refused as a float scale is; a tensor
    of another dtype is left to _scale_tensor's TypeError."""
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if isinstance(s, torch.Tensor) and s.dtype == torch.float32:
            _checks.positive_finite(name, s, otherwise="rows come out NaN or wrong")


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    cu_seqlens_q: torch.Tensor,
    seqused_k: torch.Tensor,
    block_table: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float | None = None,
    causal: bool = True,
    window_size=(-1, -1),
    softcap: float = 0.0,
    sinks: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    k_scale=None,
    v_scale=None,
) -> torch.Tensor:
    """Attention of a varlen batch of queries over a paged KV cache (decode, prefill, chunked prefill, mixed).

    q             ``[T, Hq, D]`` float16/bfloat16: the new tokens of every sequence, concatenated; contiguous in D.
    k_cache       ``[num_blocks, block_size, Hkv, D]``, q's dtype or float8_e4m3fn; contiguous in D, other strides
    v_cache       free (views of a joint ``[num_blocks, 2, block_size, Hkv, D]`` cache work). Key ``i`` of
                  sequence ``s`` lives at ``cache[block_table[s, i // block_size], i % block_size]``.
    cu_seqlens_q  ``[num_seqs + 1]`` int32: sequence s owns query tokens ``[cu_seqlens_q[s], cu_seqlens_q[s+1])``.
    seqused_k     ``[num_seqs]`` int32: keys in the cache for each sequence, including its new tokens.
    block_table   ``[num_seqs, max_blocks]`` int32, with ``max_blocks * block_size >= max_seqlen_k``.
    max_seqlen_q  at least the longest query of the batch (host int: it picks the path, never read on device).
    max_seqlen_k  at least the largest seqused_k.

    Index values are not read on the host (a sync); no value makes a kernel read or write outside the tensors. A
    sequence whose ``cu_seqlens_q`` rows fall outside q is not computed; one whose ``seqused_k`` is negative or
    past its block-table row sees no key (its rows are 0); a block id outside ``[0, num_blocks)`` reads block 0;
    with ``max_seqlen_q`` below the longest query, that query's rows may be left unwritten.
    ``TRITONKIT_CHECK_INDICES=1`` checks all of these, naming the argument, the first bad value and its position.

    Query j of a sequence with n queries and L keys sits at position ``L - n + j`` (bottom-right alignment, as
    flash-attn varlen and vLLM). ``causal`` keeps keys at positions <= the query's; ``window_size=(left, right)``
    keeps keys in ``[pos - left, pos + right]`` (-1: unbounded; with ``causal`` the right side is 0).
    ``softcap > 0`` maps each scaled logit s to ``softcap * tanh(s / softcap)``. ``sinks`` ``[Hq]`` float32 adds
    one logit per head to the softmax denominator, with no value. ``softmax_scale`` defaults to ``D ** -0.5``.
    ``k_scale``/``v_scale`` (float, or a one-element float32 tensor) are required with an fp8 cache, which holds
    ``value / scale`` as vLLM's ``reshape_and_cache(kv_cache_dtype="fp8")`` writes it. A float scale must be
    finite and > 0; a tensor's value is not read on the host (a sync): one of 0, below 0 or not finite makes rows
    NaN (a k_scale of 0 every row) or wrong. ``TRITONKIT_CHECK_INDICES=1`` refuses it as it refuses a float.

    Returns ``out`` ``[T, Hq, D]`` in q's dtype (written in place when given; a given ``out`` must not overlap
    any input, q included, nor have elements that share memory). Query tokens past
    ``cu_seqlens_q[-1]`` (CUDA-graph padding) are left unwritten; a query row that sees no key is 0. Softmax
    statistics and both dots accumulate in float32; the probabilities are rounded to q's dtype for the P @ V dot.
    No tensor data is read on the host: the call is CUDA-graph capturable.
    """
    dispatch = through_dispatcher(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, sinks, out)
    a, layout = _checked(
        q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, max_seqlen_q, max_seqlen_k, softmax_scale,
        causal, window_size, softcap, sinks, out, k_scale, v_scale, not dispatch,
    )  # fmt: skip
    if dispatch:
        # the dispatcher takes the record's fields in order, out leading the out form and left out of the other
        if out is None:
            return torch.ops.tritonkit.paged_attention(*a[:3], *a[4:])
        torch.ops.tritonkit.paged_attention_out(out, *a[:3], *a[4:])
        return out
    # the layout's recorded launches, with this call's tensors: nothing else of the record is read
    replay = layout.replay if layout is not None else None
    if replay is not None and replay(a):
        return a.out
    return forward(a, layout)
