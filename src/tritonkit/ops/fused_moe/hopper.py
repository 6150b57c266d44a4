"""The launches of kernel_hopper's Gluon GEMMs (block-wise fp8, sorted blocks, sm_90): whether a call may take each,
and its Step. api plans them in kernel.py's GEMMs' place; config.GEMM1_HOPPER / GEMM2_HOPPER turn them on."""

from __future__ import annotations

import torch

from .. import _device
from .._launch import Step
from . import config as _config

SCALE_BLOCK = _config.SCALE_BLOCK
# TMA coordinates are int32
MAX_TMA_ROWS = 2**31 - 1
# the kernels' warps: the first consumer warpgroup (the second and the loader are worker partitions)
WARPS = 4


def tma_ok(w: torch.Tensor) -> bool:
    """Whether a descriptor over ``w`` (h [R, C], or weights [E, R, C] as rows of C) can address it: contiguous,
    16-byte aligned base and row stride (kernel.py's descriptors and the Gluon kernels' alike)."""
    return w.is_contiguous() and w.data_ptr() % 16 == 0 and w.shape[-1] * w.element_size() % 16 == 0


def _tma_rows_ok(t: torch.Tensor, rows: int) -> bool:
    """:func:`tma_ok`, with ``rows`` rows (the view the Gluon kernel's descriptor takes) within int32 coordinates."""
    return tma_ok(t) and rows <= MAX_TMA_ROWS


def _hopper(t: torch.Tensor) -> bool:
    """A Hopper target for ``t``'s kernels: sm_90 (wgmma); meta tensors take the checker's target."""
    if t.device.type not in ("cuda", "meta"):
        return False
    cap = _device.capability(t.device)
    return cap is not None and cap[0] == 9


def _tile_ok(g) -> bool:
    """The config's tile is the one the Gluon kernels reproduce bit for bit: sorted blocks of 64 rows and 128-wide K
    steps, unswapped (kernel.py scales each K step's dot: narrower steps round differently)."""
    return g.block_m == 64 and g.block_k == SCALE_BLOCK and not g.swap_ab


def desc(t: torch.Tensor, *block: int):
    """A Gluon tensor descriptor of the 2D fp8 ``t`` with tiles of ``block`` in wgmma's swizzled shared layout."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    layout = gl.NVMMASharedLayout.get_default_for(list(block), gl.float8e4nv)
    return TensorDescriptor(t, list(t.shape), list(t.stride()), list(block), layout)


def gemm1_ok(g1, N: int, K: int, act: torch.Tensor, w1: torch.Tensor) -> bool:
    """Whether GEMM1 may take the Gluon kernel (config.GEMM1_HOPPER): the config's tile (:func:`_tile_ok`), a Hopper
    target, whole 128-column groups of h and 128-wide K blocks, fp8 activation rows cp.async copies 16 bytes at a
    time, and w1 as [E * 2N, K] rows TMA can address."""
    if not _config.GEMM1_HOPPER or not _tile_ok(g1) or N % SCALE_BLOCK or K % SCALE_BLOCK:
        return False
    if act.stride(1) != 1 or act.stride(0) % 16 or act.data_ptr() % 16:
        return False
    return _hopper(act) and _tma_rows_ok(w1, w1.shape[0] * w1.shape[1])


def gemm2_ok(g2, N: int, h: torch.Tensor, w2: torch.Tensor) -> bool:
    """Whether GEMM2 may take the Gluon kernel (config.GEMM2_HOPPER): the config's tile (:func:`_tile_ok`), a Hopper
    target, whole 128-wide K blocks, and h's rows and w2 as [E * K, N] rows TMA can address."""
    if not _config.GEMM2_HOPPER or not _tile_ok(g2) or N % SCALE_BLOCK:
        return False
    # the last column tile's second box starts up to 128 rows past E * K
    rows = w2.shape[0] * w2.shape[1] + SCALE_BLOCK
    return _hopper(h) and _tma_rows_ok(h, h.shape[0]) and _tma_rows_ok(w2, rows)


def gemm1_step(
    *,
    g1,
    act,
    a_s,
    a_s_strides,
    w1,
    w1_scale,
    w1s,
    h,
    h_s,
    topk_weights,
    blocks,
    numel,
    topk,
    routed_input,
    gelu,
    act_bf16,
) -> Step:
    """GEMM1 on the Gluon kernel: a program per 64 sorted rows and 128-column group of h (gate and up warpgroups);
    ``blocks`` is the alignment's (sorted_ids, expert_ids, num_tokens_post_padded, blocks)."""
    from .kernel_hopper import _fused_moe_gemm1_fp8_hopper_kernel

    E, N2, K = w1.shape
    N = N2 // 2
    sorted_ids, expert_ids, num_post, num_pid_m = blocks
    return Step(
        _fused_moe_gemm1_fp8_hopper_kernel,
        (num_pid_m * (N // SCALE_BLOCK),),
        None,
        0,
        (
            act, a_s, desc(w1.view(E * N2, K), SCALE_BLOCK, SCALE_BLOCK), w1_scale, h, h_s, topk_weights, sorted_ids,
            expert_ids, num_post, numel, num_pid_m, N, E, act.stride(0), *a_s_strides, *w1s, h.stride(0),
            h_s.stride(0),
        ),
        {
            "TOPK": topk,
            "NK": K // SCALE_BLOCK,
            "GROUP_M": g1.group_m,
            "STAGES": _config.GEMM1_HOPPER_STAGES,
            "ROUTED_ON_INPUT": routed_input,
            "GELU": gelu,
            "ACT_BF16": act_bf16,
        },
        WARPS,
    )  # fmt: skip


def gemm2_step(*, g2, h, h_s, hs_strides, w2, w2_scale, w2s, c, topk_weights, blocks, numel, routed_input) -> Step:
    """GEMM2 on the Gluon kernel: a program per 64 sorted rows and 256 output columns (a warpgroup per 128);
    ``blocks`` as for :func:`gemm1_step`."""
    from .kernel_hopper import _fused_moe_gemm2_fp8_hopper_kernel

    E, K, N = w2.shape
    sorted_ids, expert_ids, num_post, num_pid_m = blocks
    return Step(
        _fused_moe_gemm2_fp8_hopper_kernel,
        (num_pid_m * -(-K // (2 * SCALE_BLOCK)),),
        None,
        0,
        (
            desc(h, g2.block_m, SCALE_BLOCK), desc(w2.view(E * K, N), SCALE_BLOCK, SCALE_BLOCK), h_s, w2_scale, c,
            topk_weights, sorted_ids, expert_ids, num_post, numel, num_pid_m, K, E, *hs_strides, *w2s, c.stride(0),
        ),
        {
            "NK": N // SCALE_BLOCK,
            "GROUP_M": g2.group_m,
            "STAGES": _config.GEMM2_HOPPER_STAGES,
            "MUL_WEIGHT": not routed_input,
        },
        WARPS,
    )  # fmt: skip
