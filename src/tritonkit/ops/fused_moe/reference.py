"""Eager PyTorch oracle for fused_moe: the layer token by token from topk ids and weights, no Triton.

Given float64 inputs it computes in float64 and rounds where the op's contract rounds: the intermediate
``act(g) * u`` to the activation dtype (``round_intermediate``), each expert's weighted output to the activation
dtype (``round_expert_output``), and the sum once at the end. fp8 activations are quantized as the op defines it,
in float32: a dynamic scale ``max(amax, 1e-10) / 448`` per token (per-tensor and per-channel weights) or per
128-column group (block-wise), or the static scale given; ``q = fp8(clamp(x / scale, -448, 448))``. fp8 weights are
dequantized by their scales.
"""

from __future__ import annotations

import torch

FP8_MAX = 448.0
AMAX_FLOOR = 1e-10
SCALE_BLOCK = 128


def quantize_fp8(x: torch.Tensor, mode: str, static: torch.Tensor | None = None) -> torch.Tensor:
    """The dequantized fp8 value of ``x [rows, cols]``, quantized as the op does: mode "row" (one
    dynamic scale per row), "tensor" (one dynamic scale), "group" (per 128 columns) or "static"."""
    x32 = x.to(torch.float32)
    rows, cols = x32.shape
    if mode == "static":
        s = static.to(torch.float32).reshape(1, 1)
        xs = x32
    elif mode == "tensor":
        s = torch.clamp(x32.abs().amax(), min=AMAX_FLOOR).reshape(1, 1) / FP8_MAX
        xs = x32
    elif mode == "row":
        s = torch.clamp(x32.abs().amax(dim=1, keepdim=True), min=AMAX_FLOOR) / FP8_MAX
        xs = x32
    else:
        g = -(-cols // SCALE_BLOCK)
        xs = torch.nn.functional.pad(x32, (0, g * SCALE_BLOCK - cols)).view(rows, g, SCALE_BLOCK)
        s = torch.clamp(xs.abs().amax(dim=2, keepdim=True), min=AMAX_FLOOR) / FP8_MAX
    q = torch.clamp(xs / s, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    deq = q.to(ct) * s.to(ct)
    return deq.reshape(rows, -1)[:, :cols]


def dequantize_weight(w: torch.Tensor, scale: torch.Tensor | None, block_shape) -> torch.Tensor:
    """``w [E, rows, cols]`` times its scale (per-tensor, per-channel or per 128 x 128 block), in float64 for
    float64 weights, else float32."""
    w = w.to(torch.float64 if w.dtype == torch.float64 else torch.float32)
    if scale is None:
        return w
    s = scale.to(w.dtype)
    E, rows, cols = w.shape
    if block_shape is not None:
        s = s.repeat_interleave(SCALE_BLOCK, dim=1)[:, :rows].repeat_interleave(SCALE_BLOCK, dim=2)[:, :, :cols]
        return w * s
    return w * s.reshape(E, -1, 1)


def _mode(block: bool, static, per_token: bool) -> str:
    if block:
        return "group"
    if static is not None:
        return "static"
    return "row" if per_token else "tensor"


def _act(g: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "gelu":
        return torch.nn.functional.gelu(g)
    return torch.nn.functional.silu(g)


def fused_moe_reference(
    hidden_states,
    w1,
    w2,
    topk_weights,
    topk_ids,
    *,
    activation="silu",
    apply_router_weight_on_input=False,
    expert_map=None,
    w1_scale=None,
    w2_scale=None,
    a1_scale=None,
    a2_scale=None,
    block_shape=None,
    per_act_token_quant=True,
    act_dtype=None,
    round_intermediate=True,
    round_expert_output=True,
    return_magnitude=False,
):
    """``[M, K]``: rounded to ``act_dtype`` (default hidden_states's dtype), returned in float64 for float64 inputs.

    ``return_magnitude`` also returns, per output element, ``sum_j |w_j| (|W2_e| @ |h_j|)`` (the size of the
    products behind it) and ``sum_j |w_j| max_i |h_ji| max_i |W2_e,ki|`` (a bound on its largest product)."""
    act_dtype = act_dtype or hidden_states.dtype
    # float64 inputs (the oracle) compute in float64; the op's dtype (eager baseline) in float32
    ct = torch.float64 if hidden_states.dtype == torch.float64 else torch.float32
    x = hidden_states.to(ct)
    M, K = x.shape
    fp8 = w1.dtype == torch.float8_e4m3fn or w1_scale is not None
    block = block_shape is not None
    E, two_n, _ = w1.shape

    def expert(w, scale, e):
        # one expert at a time: dequantized copies of all of DeepSeek-V3's experts in float64 would take 90 GB
        return dequantize_weight(w[e : e + 1].to(ct), None if scale is None else scale[e : e + 1], block_shape)[0]

    N = two_n // 2
    if fp8:
        x = quantize_fp8(x, _mode(block, a1_scale, per_act_token_quant), a1_scale)
    ids = topk_ids.to(torch.int64)
    e_global = expert_map.shape[0] if expert_map is not None else E
    valid = (ids >= 0) & (ids < e_global)
    local = torch.where(valid, ids, 0)
    if expert_map is not None:
        local = expert_map.to(torch.int64)[local]
        valid &= (local >= 0) & (local < E)
    wts = topk_weights.to(ct)
    out = torch.zeros((M, K), dtype=ct, device=x.device)
    mag = torch.zeros_like(out) if return_magnitude else None
    peak = torch.zeros_like(out) if return_magnitude else None
    # GEMM1 and the activation per expert; the intermediates kept, since a per-tensor fp8 scale spans all of them
    groups = []
    for e in range(E):
        m_idx, j_idx = torch.nonzero(valid & (local == e), as_tuple=True)
        if m_idx.numel() == 0:
            continue
        gu = x[m_idx] @ expert(w1, w1_scale, e).T  # [n, 2N]
        wt = wts[m_idx, j_idx][:, None]
        if apply_router_weight_on_input:
            gu = gu * wt
        h = _act(gu[:, :N], activation) * gu[:, N:]
        if round_intermediate:
            h = h.to(act_dtype).to(ct)
        groups.append((e, m_idx, wt, h))
    if fp8 and groups:
        mode = _mode(block, a2_scale, per_act_token_quant)
        if mode == "tensor":
            hq = quantize_fp8(torch.cat([h for *_, h in groups]), mode).split([len(g[1]) for g in groups])
            groups = [(e, m_idx, wt, q) for (e, m_idx, wt, _), q in zip(groups, hq)]
        else:
            groups = [(e, m_idx, wt, quantize_fp8(h, mode, a2_scale)) for e, m_idx, wt, h in groups]
    for e, m_idx, wt, h in groups:
        w2e = expert(w2, w2_scale, e)
        y = h @ w2e.T  # [n, K]
        if not apply_router_weight_on_input:
            y = y * wt
        if round_expert_output:
            y = y.to(act_dtype).to(ct)
        out.index_add_(0, m_idx, y)
        if mag is not None:
            mag.index_add_(0, m_idx, wt.abs() * (h.abs() @ w2e.abs().T))
            peak.index_add_(0, m_idx, wt.abs() * h.abs().amax(dim=1, keepdim=True) * w2e.abs().amax(dim=1)[None])
    out = out.to(act_dtype)
    if ct == torch.float64:
        out = out.to(ct)
    return (out, mag, peak) if return_magnitude else out
