"""fused_moe: a mixture-of-experts layer (vLLM's fused_experts): two grouped GEMMs over tokens sorted by expert.

Launches, all on a static grid (no host sync, CUDA-graph capturable):

1. ``moe_align_block_size``: slots m * topk + j sorted by expert, each expert's run padded to block_m.
2. (fp8) ``_fused_moe_quant_kernel``: x to fp8, per token (or per 128-column group, or by a static scale; a
   dynamic per-tensor scale takes an amax launch first).
3. ``_fused_moe_gemm1_kernel``: h = act(x W1g^T) * (x W1u^T) per slot, gate and up in one dot, the activation
   fused in the epilogue (block-wise fp8: h quantized per 128 columns there too). h's rows are the slots' sorted
   positions (padding rows unwritten), so a block's rows are one tile.
4. (fp8, per-tensor/per-channel weights) ``_fused_moe_quant_kernel``: h to fp8 per row (or by a2_scale).
5. ``_fused_moe_gemm2_kernel``: c[slot] = w_slot * (h[row] W2^T), in the activation dtype.
6. ``_fused_moe_sum_kernel``: out[m] = sum_j c[m * topk + j] in float32, in j order: deterministic.

At decode (``config.slots``, a few tokens) launches 1 and 6 are left out: each GEMM block is one slot, its expert read
from ``topk_ids``, h in slot order, and the GEMM2 program that stores a token's last row of c for a column tile sums
that token's rows into ``out`` (a counter per token and tile, zeroed by GEMM1): the same float32 sums, the same bits.

Tiles of ``config.TMA_MIN_ROWS`` rows and more load the weights (and GEMM2 its h) through tensor descriptors
where TMA can address them (:func:`hopper.tma_ok`), else through pointers: the same tiles, the same bits.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from ...spec import dtype_name
from .. import _alloc, _checks, _device, _memo
from .._ints import cdiv
from .._launch import Step, launch
from .._library import op_with_outputs, through_dispatcher
from . import config as _config
from . import hopper
from .hopper import tma_ok as _tma_ok
from .config import FusedMoeConfig, fused_moe_config
from .kernel import (
    _fused_moe_gemm1_kernel,
    _fused_moe_gemm2_kernel,
    _fused_moe_quant_kernel,
    _fused_moe_sum_kernel,
)

ACT_DTYPES = (torch.float16, torch.bfloat16)
FP8_DTYPE = torch.float8_e4m3fn
ACTIVATIONS = ("silu", "gelu")
SCALE_BLOCK = _config.SCALE_BLOCK
# columns per program of the topk sum (1024 x 2 bytes: 16 bytes a thread at 4 warps)
SUM_BLOCK = 1024
SUM_WARPS = 4
# quant kernel: one row per program, 128 columns a step (the block-wise group); per-group scales take 8 groups of
# one row per program (1024 columns: 8 bf16 values, 16 bytes, a thread at 4 warps)
QUANT_WARPS = 4
QUANT_GROUPS = 8
_QUANT_MODE = {"row": 0, "group": 1, "static": 2, "tensor_amax": 3, "tensor": 4}
_KERNEL_QUANT = {"none": 0, "fp8_tensor": 1, "fp8_channel": 1, "fp8_block128": 2}


def _align(topk_ids: torch.Tensor, block_size: int, num_experts: int, expert_map: torch.Tensor | None):
    """(sorted_token_ids, expert_ids, num_tokens_post_padded) of moe_align_block_size (imported at the call: a
    test substitutes this function)."""
    from ..moe_align_block_size.api import moe_align_block_size

    return moe_align_block_size(topk_ids, block_size, num_experts, expert_map=expert_map)


def _desc(t: torch.Tensor, *block: int) -> TensorDescriptor:
    """A tensor descriptor of ``t`` with tiles of ``block``."""
    return TensorDescriptor.from_tensor(t, list(block))


def _device_name(device: torch.device) -> str | None:
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_name(device)


def _weight_scale_strides(scale: torch.Tensor, quant: str) -> tuple[int, int, int]:
    """(expert, row, column) strides of a weight scale: per-tensor scales repeat over rows (stride 0)."""
    if quant == "fp8_tensor":
        return scale.stride(0), 0, 0
    if quant == "fp8_channel":
        return scale.stride(0), scale.stride(1), 0
    return scale.stride(0), scale.stride(1), scale.stride(2)


def _act_mode(block: bool, static: torch.Tensor | None, per_token: bool) -> str:
    """How an fp8 GEMM's activations are quantized (the reference's ``quantize_fp8`` modes)."""
    if block:
        return "group"
    if static is not None:
        return "static"
    return "row" if per_token else "tensor"


def quantize_fp8(
    x: torch.Tensor, mode: str, static: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """fp8 copy of ``x [rows, cols]`` and its scales, (q, scale, row stride of scale, column stride of scale), as
    the layer quantizes its activations (the launches ``_quant_steps`` plans, run now: tests read the quantization
    alone through it); ``mode`` one of row, group, static, tensor."""
    steps: list[Step] = []
    got = _quant_steps(steps, x, mode, static)
    for st in steps:
        launch(st.kernel, st.grid, st.tail, st.constexprs, st.num_warps, st.num_stages)
    return got


def _quant_steps(
    steps: list, x: torch.Tensor, mode: str, static: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Plan :func:`quantize_fp8` into ``steps``: its outputs are allocated here and written by the steps."""
    rows, cols = x.shape
    q = _alloc.empty((rows, cols), FP8_DTYPE, x.device)
    if mode == "row":
        s = _alloc.empty((rows,), torch.float32, x.device)
        s_strides = (1, 0)
    elif mode == "group":
        s = _alloc.empty((rows, cdiv(cols, SCALE_BLOCK)), torch.float32, x.device)
        s_strides = (s.shape[1], 1)
    elif mode == "tensor":
        # one dynamic scale for the whole tensor: every row's amax first, then the quantization by it
        amax = torch.zeros((1,), dtype=torch.float32, device=x.device)
        s = _alloc.empty((1,), torch.float32, x.device)
        s_strides = (0, 0)
        steps.append(
            _new_record(
                Step,
                (
                    _fused_moe_quant_kernel,
                    (rows,),
                    None,
                    0,
                    (x, q, s, amax, rows, cols, x.stride(0), q.stride(0), 0),
                    {"BLOCK": SCALE_BLOCK, "MODE": _QUANT_MODE["tensor_amax"], "GROUPS": 1},
                    QUANT_WARPS,
                    None,
                    False,
                ),
            )
        )
        static = amax
    else:
        s = static
        s_strides = (0, 0)
    groups = QUANT_GROUPS if mode == "group" else 1
    steps.append(
        _new_record(
            Step,
            (
                _fused_moe_quant_kernel,
                (rows, cdiv(cols, SCALE_BLOCK * groups) if mode == "group" else 1),
                None,
                0,
                (x, q, s, static if static is not None else s, rows, cols, x.stride(0), q.stride(0), s_strides[0]),
                {"BLOCK": SCALE_BLOCK, "MODE": _QUANT_MODE[mode], "GROUPS": groups},
                QUANT_WARPS,
                None,
                False,
            ),
        )
    )
    return q, s, s_strides[0], s_strides[1]


# records and steps are made with tuple.__new__, not their classes: on every call's host path (0.1 against 0.4 us)
_new_record = tuple.__new__


class Args(NamedTuple):
    """A call's arguments as check_args accepted them, with the quant scheme their scales make (``quant``: none,
    fp8_tensor, fp8_channel, fp8_block128) and ``block_shape`` as a list of ints. Every function past check_args
    takes this record, never the argument list."""

    hidden_states: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor
    out: torch.Tensor | None
    activation: str
    apply_router_weight_on_input: bool
    expert_map: torch.Tensor | None
    w1_scale: torch.Tensor | None
    w2_scale: torch.Tensor | None
    a1_scale: torch.Tensor | None
    a2_scale: torch.Tensor | None
    block_shape: list[int] | None
    per_act_token_quant: bool
    quant: str


def forward(a: Args, config: FusedMoeConfig | None = None) -> torch.Tensor:
    """The op's named surface: launch the layer on a record check_args returned, into ``a.out`` (allocated when
    None). ``config`` (for the tuner) replaces the table/default config."""
    x = a.hidden_states
    out = a.out if a.out is not None else _alloc.empty(x.shape, x.dtype, x.device)
    if x.shape[0] == 0:
        return out
    for kernel, grid, _front, _n, args, constexprs, warps, stages, pdl in _steps(a, config, out):
        launch(kernel, grid, args, constexprs, warps, stages, pdl)
    return out


def _steps(a: Args, config: FusedMoeConfig | None, out: torch.Tensor) -> list[Step]:
    """The layer's launches in order, their scratch allocated here, with ``config`` or the table/default one. The
    expert alignment (moe_align_block_size, its own op) launches while planning, ahead of every step, as it would
    first in the list."""
    # one unpacking, not a field lookup per use: this is every eager call's host path
    (x, w1, w2, topk_weights, topk_ids, _out, activation, routed_input, expert_map, w1_scale, w2_scale, a1_scale,
     a2_scale, _block_shape, per_token, quant) = a  # fmt: skip
    M, K = x.shape
    E, N = w1.shape[0], w1.shape[1] // 2
    topk = topk_ids.shape[1]
    if config is None:
        cfg = fused_moe_config(M, E, N, K, topk, dtype_name(x.dtype), quant, _device_name(x.device))
    else:
        _config.validate(config, quant)
        cfg = config
    steps: list[Step] = []
    fp8, block = quant != "none", quant == "fp8_block128"
    act_bf16 = x.dtype == torch.bfloat16
    num_global = expert_map.shape[0] if expert_map is not None else E
    numel = M * topk
    topk_weights = topk_weights.contiguous()
    slots = bool(cfg.slots)
    map_arg = expert_map if expert_map is not None else topk_ids
    if slots:
        # a block per slot, its expert read from topk_ids by the GEMMs: no alignment
        sorted_ids = expert_ids = num_post = topk_ids
        num_pid_m = numel
    else:
        sorted_ids, expert_ids, num_post = _align(topk_ids, cfg.block_size, num_global, expert_map)
        num_pid_m = expert_ids.shape[0]
    kq = _KERNEL_QUANT[quant]

    # GEMM1 operand A and its scales
    if fp8:
        act, a_s, stride_asm, stride_ask = _quant_steps(steps, x, _act_mode(block, a1_scale, per_token), a1_scale)
        w1s = _weight_scale_strides(w1_scale, quant)
    else:
        act, a_s, stride_asm, stride_ask = x, x, 0, 0
        w1_scale, w1s = x, (0, 0, 0)
    g1, g2 = cfg.gemm1, cfg.gemm2
    # GEMM2 with its w2 tile loaded before anything GEMM1 writes (config.W2_EARLY_ROWS; off by default)
    early_rows = _config.w2_early_rows(N, fp8, slots, g2.swap_ab)
    if early_rows:
        g2 = dataclasses.replace(g2, block_n=early_rows)
    # the weights through a tensor descriptor on wgmma tiles, where TMA can address them (16-byte aligned base, rows)
    tma1 = g1.block_m >= _config.TMA_MIN_ROWS and _tma_ok(w1)
    # h's rows in sorted order, a block's rows contiguous: GEMM2 reads a block's h as one tile (slot order with slots)
    h_rows = numel if slots else num_pid_m * cfg.block_size
    # block-wise fp8: a program holds a whole 128-column group of h (kernel: two 64-column tiles at block_n 64)
    grid1 = num_pid_m * cdiv(N, SCALE_BLOCK if block else g1.block_n)
    # GEMM2's top-k counters, one per token and output column tile, zeroed by GEMM1's programs
    num_counters = M * cdiv(K, g2.block_n) if slots else 0
    counters = _alloc.empty((max(num_counters, 1),), torch.int32, x.device) if slots else topk_ids
    if fp8 and not block and a2_scale is None and not per_token:
        # one amax over all of h: rows of slots no expert here takes are never written, and must read as zeros
        h = torch.zeros((h_rows, N), dtype=x.dtype, device=x.device)
    else:
        h = _alloc.empty((h_rows, N), FP8_DTYPE if block else x.dtype, x.device)
    h_s = _alloc.empty((h_rows, cdiv(N, SCALE_BLOCK)), torch.float32, x.device) if block else h
    # GEMM2 as GEMM1's programmatic dependent (blocks of one slot, light GEMM2 programs: config.slots_pdl), where it
    # follows GEMM1 (per-tensor and per-channel fp8 quantize h in a launch between them)
    pdl = (
        slots and (block or not fp8) and _config.slots_pdl(g2.block_n * N * w2.element_size()) and _device.pdl(x.device)
    )
    if block and not slots and hopper.gemm1_ok(g1, N, K, act, w1):
        steps.append(hopper.gemm1_step(
            g1=g1, act=act, a_s=a_s, a_s_strides=(stride_asm, stride_ask), w1=w1, w1_scale=w1_scale, w1s=w1s, h=h,
            h_s=h_s, topk_weights=topk_weights, blocks=(sorted_ids, expert_ids, num_post, num_pid_m), numel=numel,
            topk=topk, routed_input=routed_input, gelu=activation == "gelu", act_bf16=act_bf16,
        ))  # fmt: skip
    else:
        # each half's weight rows of a tile in one 128 block: two scales a K tile, not a loaded vector
        half_scales = block and N % SCALE_BLOCK == 0
        steps.append(
            _new_record(
                Step,
                (
                    _fused_moe_gemm1_kernel,
                    (grid1,),
                    None,
                    0,
                    (
                        act,
                        a_s,
                        # w1 [E, 2N, K] as [E, 2, N, K]: one load holds an expert's gate and up rows
                        _desc(w1.view(E, 2, N, K), 1, 2, g1.block_n, g1.block_k) if tma1 else w1,
                        w1_scale,
                        h,
                        h_s,
                        topk_weights,
                        sorted_ids,
                        expert_ids,
                        num_post,
                        numel,
                        num_pid_m,
                        N,
                        K,
                        E,
                        act.stride(0),
                        stride_asm,
                        stride_ask,
                        w1.stride(0),
                        w1.stride(1),
                        *w1s,
                        h.stride(0),
                        h_s.stride(0) if block else 0,
                        topk_ids,
                        map_arg,
                        counters,
                        num_global,
                        num_counters,
                        topk_ids.stride(0),
                    ),
                    {
                        "TOPK": topk,
                        "BLOCK_M": g1.block_m,
                        "BLOCK_N": g1.block_n,
                        "BLOCK_K": g1.block_k,
                        "GROUP_M": g1.group_m,
                        "QUANT": kq,
                        "ROUTED_ON_INPUT": routed_input,
                        "GELU": activation == "gelu",
                        "ACT_BF16": act_bf16,
                        "H_FP8": block,
                        "SWAP_AB": bool(g1.swap_ab),
                        "W_TMA": tma1,
                        "SLOTS": slots,
                        "HAS_MAP": expert_map is not None,
                        "ZERO_BLOCK": max(16, triton.next_power_of_2(cdiv(num_counters, grid1))) if slots else 16,
                        "W_HALF_SCALES": half_scales,
                        # issue 35's A/B: the previous K block scaled in before this one's dot (config.py)
                        "LAZY_SCALE": _config.GEMM1_LAZY_SCALE and half_scales and not g1.swap_ab,
                        "PDL_TRIGGER": pdl,
                    },
                    g1.num_warps,
                    g1.num_stages,
                    False,
                ),
            )
        )

    # GEMM2 operand A (the intermediate) and its scales
    if block:
        hs_strides = (h_s.stride(0), 1)
    elif fp8:
        h, h_s, *hs_strides = _quant_steps(steps, h, _act_mode(False, a2_scale, per_token), a2_scale)
    else:
        hs_strides = (0, 0)
    w2s = _weight_scale_strides(w2_scale, quant) if fp8 else (0, 0, 0)
    # w2 and the h GEMM2 reads (fp8 rows of N bytes once quantized) through descriptors, as GEMM1's weights
    tma2 = g2.block_m >= _config.TMA_MIN_ROWS and _tma_ok(w2) and _tma_ok(h) and not slots
    # issue 35's A/B: the previous K block scaled in before this one's dot (config.py)
    lazy2 = _config.GEMM2_LAZY_SCALE and block and not g2.swap_ab and g2.block_n <= SCALE_BLOCK
    c = _alloc.empty((numel, K), x.dtype, x.device)
    out2, stride_om = _checks.rows_and_stride("out", out, output=True)
    if block and not slots and hopper.gemm2_ok(g2, N, h, w2):
        steps.append(hopper.gemm2_step(
            g2=g2, h=h, h_s=h_s, hs_strides=hs_strides, w2=w2, w2_scale=w2_scale, w2s=w2s, c=c,
            topk_weights=topk_weights, blocks=(sorted_ids, expert_ids, num_post, num_pid_m), numel=numel,
            routed_input=routed_input,
        ))  # fmt: skip
    else:
        steps.append(
            _new_record(
                Step,
                (
                    _fused_moe_gemm2_kernel,
                    (num_pid_m * cdiv(K, g2.block_n),),
                    None,
                    0,
                    (
                        _desc(h, g2.block_m, g2.block_k) if tma2 else h,
                        h_s,
                        _desc(w2.view(E * K, N), g2.block_n, g2.block_k) if tma2 else w2,
                        w2_scale if fp8 else x,
                        c,
                        topk_weights,
                        sorted_ids,
                        expert_ids,
                        num_post,
                        numel,
                        num_pid_m,
                        K,
                        N,
                        E,
                        h.stride(0),
                        *hs_strides,
                        w2.stride(0),
                        w2.stride(1),
                        *w2s,
                        c.stride(0),
                        out2,
                        topk_ids,
                        map_arg,
                        counters,
                        num_global,
                        topk_ids.stride(0),
                        stride_om,
                    ),
                    {
                        "TOPK": topk,
                        "BLOCK_M": g2.block_m,
                        "BLOCK_N": g2.block_n,
                        "BLOCK_K": g2.block_k,
                        "GROUP_M": g2.group_m,
                        "QUANT": kq,
                        "MUL_WEIGHT": not routed_input,
                        "ACT_BF16": act_bf16,
                        "SWAP_AB": bool(g2.swap_ab),
                        "TMA": tma2,
                        "SLOTS": slots,
                        "HAS_MAP": expert_map is not None,
                        "LAZY_SCALE": lazy2,
                        "PDL": pdl,
                        "W_EARLY": bool(early_rows),
                        "N_PAD": triton.next_power_of_2(N) if early_rows else 16,
                    },
                    g2.num_warps,
                    g2.num_stages,
                    pdl,
                ),
            )
        )
    if slots:
        return steps
    steps.append(
        _new_record(
            Step,
            (
                _fused_moe_sum_kernel,
                (M, cdiv(K, SUM_BLOCK)),
                None,
                0,
                (
                    c,
                    out2,
                    topk_ids,
                    expert_map if expert_map is not None else topk_ids,
                    M,
                    K,
                    num_global,
                    E,
                    c.stride(0),
                    stride_om,
                    topk_ids.stride(0),
                ),
                {"TOPK": topk, "BLOCK": SUM_BLOCK, "HAS_MAP": expert_map is not None, "ACT_BF16": act_bf16},
                SUM_WARPS,
                None,
                False,
            ),
        )
    )
    return steps


def _alloc_out(hidden_states: torch.Tensor, *rest) -> torch.Tensor:
    return _alloc.empty(hidden_states.shape, hidden_states.dtype, hidden_states.device)


@op_with_outputs("fused_moe", _alloc_out)
def _fused_moe_out_op(
    out: torch.Tensor,
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str,
    apply_router_weight_on_input: bool,
    expert_map: torch.Tensor | None,
    w1_scale: torch.Tensor | None,
    w2_scale: torch.Tensor | None,
    a1_scale: torch.Tensor | None,
    a2_scale: torch.Tensor | None,
    block_shape: list[int] | None,
    per_act_token_quant: bool,
    quant: str,
) -> None:
    # the dispatcher's form of a record: its fields in order, out first
    forward(
        Args(hidden_states, w1, w2, topk_weights, topk_ids, out, activation, apply_router_weight_on_input,
             expert_map, w1_scale, w2_scale, a1_scale, a2_scale, block_shape, per_act_token_quant, quant)
    )  # fmt: skip


def _scale_scheme(name: str, s, w: torch.Tensor, block_shape) -> str:
    """The scheme a weight scale's shape fits (w is [E, rows, cols]); ValueError naming it when none does."""
    _checks.tensor(name, s, dtypes=(torch.float32,))
    E, rows, cols = w.shape
    shape = tuple(s.shape)
    if block_shape is not None:
        want = (E, cdiv(rows, SCALE_BLOCK), cdiv(cols, SCALE_BLOCK))
        if shape != want:
            raise ValueError(
                f"{name} must have shape {want} for block_shape [128, 128] (one scale per 128 x 128 block "
                f"of [E, {rows}, {cols}]), got {shape}"
            )
        return "fp8_block128"
    if shape in ((E,), (E, 1, 1)):
        return "fp8_tensor"
    if shape == (E, rows, 1):
        return "fp8_channel"
    raise ValueError(
        f"{name} must be per-tensor [{E}] or [{E}, 1, 1], or per-channel [{E}, {rows}, 1] (or pass "
        f"block_shape=[128, 128] for [E, {cdiv(rows, SCALE_BLOCK)}, {cdiv(cols, SCALE_BLOCK)}] "
        f"blocks), got {shape}"
    )


def check_args(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str = "silu",
    apply_router_weight_on_input: bool = False,
    expert_map: torch.Tensor | None = None,
    w1_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    a1_scale: torch.Tensor | None = None,
    a2_scale: torch.Tensor | None = None,
    block_shape: list[int] | None = None,
    per_act_token_quant: bool = True,
    out: torch.Tensor | None = None,
) -> Args:
    """The op's named surface: fused_moe's arguments checked on metadata alone (no device sync), a ValueError or
    TypeError naming the bad one, nothing written; returns the call's record (``out`` as given, None included),
    which :func:`forward` launches on."""
    _checks.inference_only(hidden_states=hidden_states, w1=w1, w2=w2, topk_weights=topk_weights, out=out)
    x = _checks.tensor("hidden_states", hidden_states, dtypes=ACT_DTYPES, ndim=2, last_contiguous=True)
    M, K = x.shape
    _checks.tensor("w1", w1, ndim=3, last_contiguous=True)
    _checks.tensor("w2", w2, ndim=3, last_contiguous=True)
    if w1.dtype not in (x.dtype, FP8_DTYPE):
        raise TypeError(
            f"w1 must have hidden_states's dtype {dtype_name(x.dtype)} or float8_e4m3fn, got {dtype_name(w1.dtype)}"
        )
    _checks.same_dtype("w2", w2, "w1", w1)
    E, two_n, w1_k = w1.shape
    if E < 1:
        raise ValueError(f"w1 must hold at least one expert ([E, 2N, K] with E >= 1), got shape {tuple(w1.shape)}")
    if w1_k != K:
        raise ValueError(f"w1 must have shape [E, 2N, K] with K = hidden_states.shape[1] = {K}, got {tuple(w1.shape)}")
    if two_n % 2 or two_n == 0:
        raise ValueError(
            f"w1 must have an even, nonzero second dimension (gate rows [0, N), up rows [N, 2N)), got {tuple(w1.shape)}"
        )
    N = two_n // 2
    _checks.shape_equal("w2", w2, (E, K, N), "[E, K, N] with E, N from w1 and K from hidden_states")
    _checks.tensor("topk_weights", topk_weights, dtypes=(torch.float32, x.dtype), ndim=2)
    _checks.tensor("topk_ids", topk_ids, dtypes=_checks.INDEX_DTYPES, ndim=2)
    if topk_ids.shape[0] != M or topk_ids.shape[1] < 1:
        raise ValueError(
            f"topk_ids must have shape [M, topk] with M = hidden_states.shape[0] = {M} and topk >= 1, "
            f"got {tuple(topk_ids.shape)}"
        )
    _checks.shape_equal("topk_weights", topk_weights, tuple(topk_ids.shape), "topk_ids's [M, topk]")
    if not topk_ids.is_contiguous():
        raise ValueError(f"topk_ids must be contiguous, got strides {tuple(topk_ids.stride())}")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    if apply_router_weight_on_input and topk_ids.shape[1] != 1:
        raise ValueError(
            f"apply_router_weight_on_input needs topk == 1 (the weight scales the token's input, "
            f"shared by all its experts), got topk {topk_ids.shape[1]}"
        )
    if expert_map is not None:
        _checks.tensor("expert_map", expert_map, dtypes=(torch.int32,), ndim=1)
        if expert_map.shape[0] < 1 or expert_map.stride(0) != 1 and expert_map.shape[0] > 1:
            raise ValueError(
                f"expert_map must be a non-empty contiguous [E_global] tensor, got shape {tuple(expert_map.shape)}"
            )
    quant = "none"
    if w1.dtype == FP8_DTYPE:
        if w1_scale is None:
            raise ValueError("w1_scale is required: w1 is float8_e4m3fn")
        if w2_scale is None:
            raise ValueError("w2_scale is required: w2 is float8_e4m3fn")
        if block_shape is not None and [int(b) for b in block_shape] != [SCALE_BLOCK, SCALE_BLOCK]:
            raise ValueError(f"block_shape must be [128, 128] or None, got {list(block_shape)}")
        quant = _scale_scheme("w1_scale", w1_scale, w1, block_shape)
        q2 = _scale_scheme("w2_scale", w2_scale, w2, block_shape)
        if q2 != quant:
            raise ValueError(
                f"w2_scale must follow w1_scale's scheme ({quant}), got a {q2} shape {tuple(w2_scale.shape)}"
            )
        for name, s in (("a1_scale", a1_scale), ("a2_scale", a2_scale)):
            if s is None:
                continue
            if block_shape is not None:
                raise ValueError(
                    f"{name} must be None with block_shape: block-wise activations are quantized "
                    "dynamically per 128-column group"
                )
            _checks.tensor(name, s, dtypes=(torch.float32,))
            if s.numel() != 1:
                raise ValueError(f"{name} must hold one static per-tensor scale, got shape {tuple(s.shape)}")
    else:
        for name, s in (
            ("w1_scale", w1_scale),
            ("w2_scale", w2_scale),
            ("a1_scale", a1_scale),
            ("a2_scale", a2_scale),
            ("block_shape", block_shape),
        ):
            if s is not None:
                raise ValueError(f"{name} must be None: w1 is {dtype_name(w1.dtype)}, not float8_e4m3fn")
    if out is not None:
        _checks.tensor("out", out, dtypes=(x.dtype,), ndim=2, last_contiguous=True)
        _checks.shape_equal("out", out, (M, K), "hidden_states's [M, K]")
        if out.shape[0] > 1 and out.stride(0) < K:
            raise ValueError(f"out's rows must not overlap (row stride >= {K}), got strides {tuple(out.stride())}")
    _checks.same_device(
        hidden_states=x,
        w1=w1,
        w2=w2,
        topk_weights=topk_weights,
        topk_ids=topk_ids,
        out=out,
        expert_map=expert_map,
        w1_scale=w1_scale,
        w2_scale=w2_scale,
        a1_scale=a1_scale,
        a2_scale=a2_scale,
    )
    if out is not None:
        # GEMM2 and the topk sum write out while they (or a later call) read the rest; hidden_states is read by GEMM1
        # (and the quantization) before any write, so out may be exactly it (vLLM's inplace)
        _checks.no_overlap("out", out, True, hidden_states=x)
        _checks.no_overlap(
            "out",
            out,
            topk_weights=topk_weights,
            topk_ids=topk_ids,
            expert_map=expert_map,
            w1=w1,
            w2=w2,
            w1_scale=w1_scale,
            w2_scale=w2_scale,
            a1_scale=a1_scale,
            a2_scale=a2_scale,
        )
    if _checks.indices_checked():
        e_global = expert_map.shape[0] if expert_map is not None else E
        _checks.index_range(
            "topk_ids", topk_ids, e_global, "expert ids" + (" (expert_map's length)" if expert_map is not None else "")
        )
        if expert_map is not None:
            _checks.index_range("expert_map", expert_map, E, "local expert indices (-1: another rank's)", low=-1)
    if not isinstance(per_act_token_quant, bool):
        raise TypeError(f"per_act_token_quant must be a bool, got {type(per_act_token_quant).__name__}")
    if not per_act_token_quant and quant == "fp8_block128":
        raise ValueError(
            "per_act_token_quant=False needs per-tensor or per-channel fp8 weights: block-wise "
            "activations are quantized per 128-column group"
        )
    bs = [int(b) for b in block_shape] if block_shape is not None else None
    # tuple.__new__, not Args(...): made on every call's host path
    return _new_record(Args, (
        hidden_states, w1, w2, topk_weights, topk_ids, out, activation, bool(apply_router_weight_on_input),
        expert_map, w1_scale, w2_scale, a1_scale, a2_scale, bs, per_act_token_quant, quant,
    ))  # fmt: skip


def fused_moe(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    activation: str = "silu",
    apply_router_weight_on_input: bool = False,
    expert_map: torch.Tensor | None = None,
    w1_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    a1_scale: torch.Tensor | None = None,
    a2_scale: torch.Tensor | None = None,
    block_shape: list[int] | None = None,
    per_act_token_quant: bool = True,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """A mixture-of-experts MLP over routed tokens (vLLM's ``fused_experts``):
    ``out[m] = sum_j w[m, j] * W2[e] @ (act(W1[e, :N] @ x[m]) * (W1[e, N:] @ x[m]))`` with ``e = topk_ids[m, j]``.

    hidden_states  ``[M, K]`` float16/bfloat16 (float32 is rejected), last dim contiguous.
    w1             ``[E, 2N, K]``: gate rows ``[0, N)``, up rows ``[N, 2N)``; hidden_states's dtype or float8_e4m3fn.
    w2             ``[E, K, N]``, w1's dtype. Both last-dim contiguous.
    topk_weights   ``[M, topk]`` float32 or hidden_states's dtype (multiplied in float32).
    topk_ids       ``[M, topk]`` int32/int64, contiguous, global expert ids. Ids are range-checked only with
                   ``TRITONKIT_CHECK_INDICES=1`` (a host sync; vLLM never checks): unchecked, a slot whose id is
                   outside ``[0, E_global)`` (moe_align_block_size drops it), or maps to -1, adds nothing, and no id
                   value makes a kernel read or write out of bounds.
    activation     "silu" (``g * sigmoid(g)``) or "gelu" (exact, erf).
    apply_router_weight_on_input  scale x by the weight instead of the expert's output (topk == 1 only): applied to
                   GEMM1's float32 sums (GEMM1 is linear), before the activation.
    expert_map     ``[E_global]`` int32, global id -> local index in w1/w2 or -1 (expert parallelism).
    w1_scale, w2_scale  float32 fp8 weight scales: per-tensor ``[E]``/``[E, 1, 1]``, per-channel ``[E, rows, 1]``, or
                   with ``block_shape=[128, 128]`` per block ``[E, ceil(rows/128), ceil(cols/128)]``.
    a1_scale, a2_scale  float32 static per-tensor activation scales of GEMM1/GEMM2 inputs (not with block_shape);
                   when None, activations are quantized dynamically: per token (per-tensor/per-channel weights) or
                   per 128-column group (block-wise). A dynamic scale is ``max(amax, 1e-10) / 448`` (float32) and
                   ``q = fp8(clamp(x / scale, -448, 448))``.
    per_act_token_quant  False: one dynamic scale for the whole activation tensor instead of one per token (vLLM's
                   choice when a per-tensor fp8 layer has no static scales); per-tensor/per-channel weights only.
    out            ``[M, K]`` hidden_states's dtype, rows one stride apart; written in place and returned. It may be
                   hidden_states itself (vLLM's inplace).

    Scratch: the intermediate ``[M * topk, N]`` and each expert's output ``[M * topk, K]`` in the activation dtype
    (plus fp8 copies under fp8), unchunked: DeepSeek-V3 at 65536 tokens takes about 9.6 GB (vLLM processes batches
    in chunks of ``VLLM_FUSED_MOE_CHUNK_SIZE`` tokens; split a batch that large).

    Returns ``[M, K]`` in hidden_states's dtype. GEMMs accumulate in float32; the intermediate ``act(g) * u`` is
    rounded to the activation dtype (then fp8-quantized under fp8), each expert's weighted output is rounded to the
    activation dtype, and the topk sum runs in float32 in j order (deterministic) with one rounding at the end.
    """
    # positionally: keywords cost the eager call's host path ~0.5 us
    a = check_args(
        hidden_states, w1, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, expert_map,
        w1_scale, w2_scale, a1_scale, a2_scale, block_shape, per_act_token_quant, out,
    )  # fmt: skip
    if through_dispatcher(
        hidden_states, w1, w2, topk_weights, topk_ids, out, expert_map, w1_scale, w2_scale, a1_scale, a2_scale
    ):
        # the dispatcher takes the record's fields in order, out leading the out form and left out of the other
        if out is None:
            return torch.ops.tritonkit.fused_moe(*a[:5], *a[6:])
        torch.ops.tritonkit.fused_moe_out(out, *a[:5], *a[6:])
        return out
    return forward(a)


def reload_tables() -> None:
    """Forget the tuned tile tables read so far, so later calls read ``ops/fused_moe/configs/`` again (after
    ``tritonkit tune`` wrote one in this process). The same as ``tritonkit.ops.clear_caches``, which forgets them
    with every other memo of the ops."""
    _memo.clear_caches()
