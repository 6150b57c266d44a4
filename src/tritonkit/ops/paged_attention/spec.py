"""The OpSpec of paged_attention.

Shape keys
----------
num_seqs                 sequences in the batch.
q_len, context           new query tokens and keys already cached before them, per sequence: an int (every
                         sequence) or a tuple (one per sequence). Sequence s has seqused_k = context + q_len keys.
num_heads, num_kv_heads  query heads and KV heads; head_dim; block_size (keys per cache page).
causal, window_left, window_right, softcap, sinks   the features (defaults 1, -1, -1, 0.0, 0).
kv_dtype                 "auto" (q's dtype) or "fp8" (float8_e4m3fn cache with per-tensor scales).
joint_kv                 1: k_cache and v_cache are views of one [num_blocks, 2, block_size, Hkv, D] tensor.
num_blocks               physical cache pages (default: the pages used plus a quarter spare).

Inputs: the block table maps each sequence's pages to a random permutation of the physical pages; spare pages,
block-table columns past a sequence's last page and cache slots past its last key are NaN, so reading a key the
kernel must not read poisons the output.

Families (which tensors carry the difficulty):
randn     q, k, v standard normal.
near_max  large logits: q scaled so scaled logits have standard deviation 40 (maxima past 88, where float32 exp
          overflows without the max subtraction); a peaked softmax.
constant  all-equal logits: every key of a KV head is the same vector, so each row's softmax is uniform over the
          keys it sees (the denominator across tiles, splits and the sink carries all the information).
"""

from __future__ import annotations

import torch

from ...spec import OpSpec, Shape, Work, upcast
from ...tolerance import Tolerance
from . import peers
from .api import paged_attention
from .reference import paged_attention_reference

LARGE_LOGIT_STD = 40.0
FP8_MAX = 448.0


def _per_seq(v, n: int) -> list[int]:
    return [int(x) for x in v] if isinstance(v, (tuple, list)) else [int(v)] * n


def _lengths(shape: Shape) -> tuple[list[int], list[int]]:
    n = shape["num_seqs"]
    q_lens, ctx = _per_seq(shape["q_len"], n), _per_seq(shape["context"], n)
    if len(q_lens) != n or len(ctx) != n:
        raise ValueError(
            f"q_len and context must have num_seqs = {n} entries, got {shape['q_len']}, {shape['context']}"
        )
    return q_lens, [c + q for c, q in zip(ctx, q_lens)]


def _window(shape: Shape) -> tuple[int, int]:
    return shape.get("window_left", -1), shape.get("window_right", -1)


def make_inputs(shape: Shape, dtype: torch.dtype, fill) -> dict:
    dev = fill.device
    q_lens, seq_k = _lengths(shape)
    hq, hkv, d, bs = shape["num_heads"], shape["num_kv_heads"], shape["head_dim"], shape["block_size"]
    num_tokens = sum(q_lens)
    pages = [-(-n // bs) for n in seq_k]
    used = sum(pages)
    num_blocks = shape.get("num_blocks", used + max(2, used // 4))
    width = max(pages + [1]) + 1  # one column more than any sequence needs: it points at a NaN page

    # logical page p of sequence s is logical block first[s] + p; logical block i lives in physical block perm[i];
    # logical block `used` (a spare) fills the unused columns
    n_pages = torch.tensor(pages, dtype=torch.int64, device=dev)
    first = torch.cumsum(n_pages, 0) - n_pages
    col = torch.arange(width, dtype=torch.int64, device=dev)
    logical = torch.where(col[None, :] < n_pages[:, None], first[:, None] + col[None, :], used)
    perm = fill.randperm(num_blocks)
    block_table = perm[logical].to(torch.int32)  # [num_seqs, width]
    # slots holding a key of some sequence; everything else becomes NaN (scatter, not boolean indexing, so that
    # meta tensors work too)
    pos = torch.arange(width * bs, dtype=torch.int64, device=dev)
    slot = block_table.long().repeat_interleave(bs, dim=1) * bs + pos % bs  # [num_seqs, width * bs]
    holds_key = pos[None, :] < torch.tensor(seq_k, dtype=torch.int64, device=dev)[:, None]
    # int32, not int8: PyTorch's int8 scatter_reduce kernel reads past its allocation (compute-sanitizer memcheck)
    valid = torch.zeros(num_blocks * bs, dtype=torch.int32, device=dev)
    valid = valid.scatter_reduce(0, slot.reshape(-1), holds_key.reshape(-1).to(torch.int32), "amax")
    valid = valid.view(num_blocks, bs, 1, 1).bool()

    cache_shape = (num_blocks, bs, hkv, d)
    if fill.family == "constant":
        # one key vector per KV head, repeated at every position: all logits of a row are equal
        k = fill((1, 1, hkv, d), torch.float32, family="randn").expand(cache_shape)
    else:
        k = fill(cache_shape, torch.float32, family="randn")
    v = fill(cache_shape, torch.float32, family="randn")
    q = fill((num_tokens, hq, d), torch.float32, family="randn")
    if fill.family == "near_max":
        q = q * LARGE_LOGIT_STD

    kv_dtype = dtype
    scales = {}
    if shape.get("kv_dtype", "auto") == "fp8":
        kv_dtype = torch.float8_e4m3fn
        # per-tensor scales as reshape_and_cache(kv_cache_dtype="fp8") uses them: the cache holds x / scale
        # |x| <= 4.5 maps below e4m3's 448; the rare larger randn value saturates instead of becoming NaN
        scales = {
            name: torch.full((1,), 4.5 / FP8_MAX, dtype=torch.float32, device=dev) for name in ("k_scale", "v_scale")
        }
        k = torch.clamp(k / scales["k_scale"], -FP8_MAX, FP8_MAX)
        v = torch.clamp(v / scales["v_scale"], -FP8_MAX, FP8_MAX)
    nan = torch.tensor(float("nan"), device=dev)
    k = torch.where(valid, k, nan)
    v = torch.where(valid, v, nan)
    if shape.get("joint_kv", 0):
        kv = torch.stack([k, v], dim=1).to(kv_dtype)  # [num_blocks, 2, block_size, Hkv, D]
        k_cache, v_cache = kv[:, 0], kv[:, 1]
    else:
        k_cache, v_cache = k.to(kv_dtype), v.to(kv_dtype)

    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    inputs = {
        "q": q.to(dtype),
        "k_cache": k_cache,
        "v_cache": v_cache,
        "cu_seqlens_q": torch.tensor(cu, dtype=torch.int32, device=dev),
        "seqused_k": torch.tensor(seq_k, dtype=torch.int32, device=dev),
        "block_table": block_table,
        "max_seqlen_q": max(q_lens + [0]),
        "max_seqlen_k": max(seq_k + [0]),
        "causal": bool(shape.get("causal", 1)),
        "window_size": _window(shape),
        "softcap": float(shape.get("softcap", 0.0)),
        **scales,
    }
    if shape.get("sinks", 0):
        inputs["sinks"] = 2.0 * fill((hq,), torch.float32, family="randn")
    return inputs


_ARGS = ("cu_seqlens_q", "seqused_k", "block_table", "causal", "window_size", "softcap", "sinks", "k_scale", "v_scale")


def call(inputs: dict) -> dict:
    kw = {k: inputs[k] for k in _ARGS if k in inputs}
    return {
        "out": paged_attention(
            inputs["q"],
            inputs["k_cache"],
            inputs["v_cache"],
            max_seqlen_q=inputs["max_seqlen_q"],
            max_seqlen_k=inputs["max_seqlen_k"],
            **kw,
        )
    }


def reference(inputs: dict, dtype: torch.dtype) -> dict:
    kw = {k: inputs[k] for k in _ARGS if k in inputs}
    return {"out": paged_attention_reference(inputs["q"], inputs["k_cache"], inputs["v_cache"], **kw)}


def error_scale(inputs: dict) -> dict:
    """sum(p |v|) / sum(p) per output element (the sink in the denominator): rounding each probability to q's dtype
    for the P @ V dot moves the output by at most the unit roundoff times this."""
    kw = {k: inputs[k] for k in _ARGS if k in inputs}
    return {"out": paged_attention_reference(inputs["q"], inputs["k_cache"], inputs["v_cache"], magnitude=True, **kw)}


#: Past this many bytes of float64 inputs the oracle covers a sample of whole sequences, over only the cache pages
#: their block-table rows name. Sequences are independent, so a wrong tile, offset or page shows in the sample as in
#: the whole: 2^20 query rows (4096 prompts of 256 tokens) upcast to 40 GB, more than an 80 GB card holds beside
#: the op's own 21 GB, and a cache past 2^31 elements to 34 GB of which its few sequences read a fraction.
ORACLE_BYTES = 4 << 30
#: sequences in a sample: the first, the last and evenly spaced between
ORACLE_SEQS = 64


def oracle_inputs(inputs: dict) -> tuple[dict, dict]:
    """The float64 oracle's inputs and the output rows they cover. Every floating tensor upcast, every row covered,
    while that fits ORACLE_BYTES; past it ORACLE_SEQS sequences (all of them if fewer) with their query rows, their
    block-table rows renumbered onto a cache of the pages those rows name (spare columns' page included)."""
    q, k_cache, v_cache = inputs["q"], inputs["k_cache"], inputs["v_cache"]
    if 8 * (q.numel() + k_cache.numel() + v_cache.numel()) <= ORACLE_BYTES:
        return upcast(inputs), {}
    dev = q.device
    cu = inputs["cu_seqlens_q"].tolist()
    n = len(cu) - 1
    seqs = (
        list(range(n))
        if n <= ORACLE_SEQS
        else sorted({round(i * (n - 1) / (ORACLE_SEQS - 1)) for i in range(ORACLE_SEQS)})
    )
    pick = torch.tensor(seqs, dtype=torch.long, device=dev)
    rows = torch.cat([torch.arange(cu[s], cu[s + 1], dtype=torch.long, device=dev) for s in seqs])
    lens = torch.tensor([cu[s + 1] - cu[s] for s in seqs], dtype=torch.int32, device=dev)
    table = inputs["block_table"][pick].long()
    pages = torch.unique(table)  # sorted
    out = dict(inputs)
    out["q"] = q[rows]
    out["k_cache"] = k_cache.index_select(0, pages)
    out["v_cache"] = v_cache.index_select(0, pages)
    out["block_table"] = torch.searchsorted(pages, table).to(inputs["block_table"].dtype)
    out["seqused_k"] = inputs["seqused_k"][pick]
    out["cu_seqlens_q"] = torch.cat([lens.new_zeros(1), torch.cumsum(lens, 0, dtype=torch.int32)])
    out["max_seqlen_q"] = int(lens.max())
    out["max_seqlen_k"] = int(out["seqused_k"].max())
    return upcast(out), {"out": rows}


def _visible_keys(shape: Shape) -> tuple[int, int]:
    """(sum over query rows of the keys each attends, sum over sequences of the keys any row attends)."""
    q_lens, seq_k = _lengths(shape)
    left, right = _window(shape)
    if shape.get("causal", 1):
        right = 0
    n = torch.tensor(q_lens, dtype=torch.int64)
    length = torch.tensor(seq_k, dtype=torch.int64)
    # one entry per query row: its position L - n + j
    seq = torch.repeat_interleave(torch.arange(len(q_lens)), n)
    start = torch.cumsum(n, 0) - n
    qpos = (length - n)[seq] + torch.arange(int(n.sum())) - start[seq]
    hi = torch.clamp(qpos + right + 1, max=length[seq]) if right >= 0 else length[seq]
    lo = torch.clamp(qpos - left, min=0) if left >= 0 else torch.zeros_like(qpos)
    pairs = int(torch.clamp(hi - lo, min=0).sum())
    # the rows' ranges are consecutive windows: their union runs from the first row's start to the end
    first_lo = torch.clamp(length - n - left, min=0) if left >= 0 else torch.zeros_like(length)
    union = int(torch.where(n > 0, torch.clamp(length - first_lo, min=0), 0).sum())
    return pairs, union


def work(shape: Shape, dtype: torch.dtype) -> Work:
    q_lens, _ = _lengths(shape)
    hq, hkv, d = shape["num_heads"], shape["num_kv_heads"], shape["head_dim"]
    e = torch.finfo(dtype).bits // 8
    kv_e = 1 if shape.get("kv_dtype", "auto") == "fp8" else e
    pairs, union = _visible_keys(shape)
    # KV bytes actually needed (each visible key and value once per KV head) + q read + out written
    nbytes = 2 * union * hkv * d * kv_e + 2 * sum(q_lens) * hq * d * e
    # QK^T and PV: 2 flops per multiply-add each, over the (query, key) pairs the masks keep
    return Work(bytes=nbytes, flops=4 * pairs * d * hq)


#: keys per sequence in the sweep, capped so the whole cache stays at 2^20 tokens (4 GB for llama3-8b)
SWEEP_CONTEXT = 4096
SWEEP_MAX_CACHE_TOKENS = 1 << 20


def sweep_shape(model, num_tokens: int) -> Shape | None:
    """Decode: num_tokens sequences of one new token each, over min(4096, 2^20 / num_tokens) keys apiece (the
    cap keeps a 65536-sequence batch's cache at 2^20 tokens), block_size 16, causal. None for a model whose
    attention is not modelled."""
    if not model.has_attention:
        return None
    keys = max(1, min(SWEEP_CONTEXT, SWEEP_MAX_CACHE_TOKENS // num_tokens))
    return Shape(
        num_seqs=num_tokens,
        q_len=1,
        context=keys - 1,
        num_heads=model.num_heads,
        num_kv_heads=model.num_kv_heads,
        head_dim=model.head_dim,
        block_size=16,
        causal=1,
    )


#: the bench's series stop where one point's KV cache would pass this many tokens (4 GiB in bf16 at 8 KV heads x 128)
SERIES_MAX_CACHE_TOKENS = 1 << 20
#: keys per sequence of the decode series (each a batch of num_tokens sequences, one new token each): 4K and 32K
#: are the published table's; 1K, 8K and 128K span the context range a backend is picked on (batch 1 x 128K fits
#: the cap up to 8 sequences)
SERIES_DECODE_KEYS = (1024, 4096, 8192, 32768, 131072)
#: the chunked-prefill series: a chunk of num_tokens new tokens whose sequence reaches this many keys
SERIES_CHUNK_CONTEXT = 16384
#: the mixed series: this many decode sequences at 4096 keys beside one causal prompt of the remaining tokens
SERIES_MIXED_DECODE = 64
#: the shortest prompt of the prefill series (below it a prompt is a decode-sized call)
SERIES_MIN_PROMPT = 16
#: the speculative-decoding series: batches of num_tokens / this many sequences, each verifying this many draft
#: tokens over SERIES_SPEC_KEYS keys (vLLM's verify step)
SERIES_SPEC_TOKENS = 4
SERIES_SPEC_KEYS = (4096, 32768)


def sweep_series(model, num_tokens: int) -> dict[str, Shape | None]:
    """The bench's axes at ``num_tokens`` query tokens: decode batches at 1K, 4K, 8K, 32K and 128K keys per sequence
    (batch = num_tokens, up to a 2^20-token cache), one causal prompt of num_tokens tokens, a chunk of num_tokens
    new tokens after 16K - num_tokens cached ones (chunked prefill), speculative decoding (num_tokens / 4
    sequences verifying 4 tokens each over 4K and 32K keys), and a mixed batch (64 decode sequences at 4K keys
    beside a prompt of num_tokens - 64 tokens). None where a series has no point; ``tritonkit bench
    --series`` picks some."""
    if not model.has_attention:
        return {}
    heads = dict(
        num_heads=model.num_heads, num_kv_heads=model.num_kv_heads, head_dim=model.head_dim, block_size=16, causal=1
    )
    t = num_tokens
    out: dict[str, Shape | None] = {}
    for keys in SERIES_DECODE_KEYS:
        fits = t * keys <= SERIES_MAX_CACHE_TOKENS
        out[f"decode {keys // 1024}K keys"] = Shape(num_seqs=t, q_len=1, context=keys - 1, **heads) if fits else None
    out["prefill causal"] = Shape(num_seqs=1, q_len=t, context=0, **heads) if t >= SERIES_MIN_PROMPT else None
    c = SERIES_CHUNK_CONTEXT
    out[f"chunked prefill to {c // 1024}K keys"] = (
        Shape(num_seqs=1, q_len=t, context=c - t, **heads) if SERIES_MIN_PROMPT <= t < c else None
    )
    n = SERIES_SPEC_TOKENS
    for keys in SERIES_SPEC_KEYS:
        b = t // n
        fits = t % n == 0 and b >= 1 and b * keys <= SERIES_MAX_CACHE_TOKENS
        out[f"speculative {n} tokens at {keys // 1024}K keys"] = (
            Shape(num_seqs=b, q_len=n, context=keys - n, **heads) if fits else None
        )
    m = SERIES_MIXED_DECODE
    out[f"mixed: prompt + {m} decode at 4K"] = (
        Shape(num_seqs=m + 1, q_len=(t - m,) + (1,) * m, context=(0,) + (4095,) * m, **heads) if t >= 2 * m else None
    )
    return out


def _s(**kw) -> Shape:
    base = dict(num_heads=4, num_kv_heads=2, head_dim=64, block_size=16)
    base.update(kw)
    return Shape(base)


# Base model: 4 query heads over 2 KV heads, head_dim 64, pages of 16 (decode takes q_len <= 8 at group 2, and the
# wide decode rows batches whose longest query is at most 64; longer ones go to the prefill kernel).
_BOUNDARY = (
    # decode at page boundaries: 1, bs - 1, bs, bs + 1, 2 bs + 1 keys, and a context of 1
    _s(num_seqs=6, q_len=1, context=(0, 14, 15, 16, 32, 1)),
    # one long sequence: 16 tiles of 64 keys -> 4 KV splits and the merge kernel
    _s(num_seqs=1, q_len=1, context=1030),
    # speculative decode (q_len 2..8 stays on the decode path) with causal rows inside the group
    _s(num_seqs=3, q_len=(2, 5, 8), context=(0, 17, 90)),
    # GQA 7 (28/4 heads), head_dim 80 padded to 128; decode and prefill (18-token query tiles)
    _s(num_seqs=2, q_len=1, context=(6, 47), num_heads=7, num_kv_heads=1, head_dim=80),
    _s(num_seqs=2, q_len=(3, 40), context=(0, 5), num_heads=7, num_kv_heads=1, head_dim=80),
    # MHA (group 1), head_dim 96, block_size 32; group 16 (one token per decode program)
    _s(num_seqs=2, q_len=(1, 20), context=(40, 12), num_heads=2, num_kv_heads=2, head_dim=96, block_size=32),
    _s(num_seqs=3, q_len=(1, 2, 1), context=(15, 30, 70), num_heads=16, num_kv_heads=1),
    # prefill without context (two query tiles), chunked prefill over a context
    _s(num_seqs=2, q_len=(17, 70), context=0),
    _s(num_seqs=2, q_len=(33, 9), context=(50, 63), block_size=64),
    # mixed decode + prefill in one call, with an empty sequence (CUDA-graph padding style)
    _s(num_seqs=5, q_len=(1, 20, 0, 1, 9), context=(30, 0, 4, 64, 100)),
    # block_size 1: every key its own page
    _s(num_seqs=2, q_len=(1, 12), context=(9, 3), block_size=1),
    # non-causal, sliding windows (causal and two-sided; few keys per row), softcap, sinks, all at once
    _s(num_seqs=2, q_len=(1, 37), context=(20, 11), causal=0),
    _s(num_seqs=3, q_len=(1, 70, 3), context=(70, 60, 33), window_left=8),
    _s(num_seqs=2, q_len=(1, 30), context=(45, 20), causal=0, window_left=5, window_right=3),
    _s(num_seqs=2, q_len=(1, 65), context=(33, 40), softcap=5.0),
    _s(num_seqs=2, q_len=(1, 25), context=(300, 40), sinks=1),
    _s(num_seqs=3, q_len=(1, 66, 4), context=(600, 30, 16), window_left=20, softcap=8.0, sinks=1, joint_kv=1),
    # the same features on the wide decode rows (a longest query of 9..64 at group 2), with KV splits
    _s(num_seqs=2, q_len=(3, 26), context=(900, 300), window_left=200, softcap=8.0, sinks=1),
    # chunked prefill over a long context: the prefill kernel's KV splits (2 at 2170 keys) and its merge; with a
    # left window, softcap and sinks beside a decode sequence
    _s(num_seqs=1, q_len=70, context=2100),
    _s(num_seqs=2, q_len=(1, 80), context=(2000, 2100), window_left=2000, softcap=8.0, sinks=1),
    # head_dim 128 and 256 with the model-like group 4
    _s(num_seqs=2, q_len=(1, 19), context=(64, 13), num_heads=8, num_kv_heads=2, head_dim=128),
    _s(num_seqs=2, q_len=(1, 19), context=(31, 13), num_heads=4, num_kv_heads=1, head_dim=256),
    # fp8 (e4m3) cache with per-tensor scales: decode with splits, and prefill
    _s(num_seqs=2, q_len=(1, 21), context=(1100, 20), kv_dtype="fp8"),
    _s(num_seqs=2, q_len=(1, 70), context=(1100, 20), kv_dtype="fp8"),
)

# KV caches past 2^31 elements (16 x 8 x 128 = 16384 per page): pages of a random permutation land on both sides
_LARGE_CACHE = dict(num_heads=32, num_kv_heads=8, head_dim=128, block_size=16, num_blocks=(1 << 31) // 16384 + 512)
_LARGE = (
    Shape(num_seqs=8, q_len=1, context=8191, **_LARGE_CACHE),
    Shape(num_seqs=2, q_len=1024, context=1024, **_LARGE_CACHE),
    # a 64-token chunk over 16K keys: the split prefill path
    Shape(num_seqs=1, q_len=64, context=16320, **_LARGE_CACHE),
)


# P is rounded to the value dtype before the P @ V tensor-core dot (as in FlashAttention): each weight is off by up to
# the unit roundoff u, so an output element is off by up to u * sum(p|v|) / sum(p), which error_scale computes per
# element (compute_eps = u): an absolute error where the output cancels towards 0, larger where the row's weighted
# |v| is (a 4096 x 256-token batch has elements past 1.1x a bound of u * 1). rtol stays the table's output
# rounding; fp16 keeps 2u (u = 2^-11), as its rtol is tighter.
_TOLERANCE = {
    torch.bfloat16: Tolerance(
        8e-3,
        1e-5,
        "P rounded to bf16 for the PV dot: u = 2^-8 of sum(p|v|)/sum(p) "
        "(error_scale), plus the table's output rounding",
        compute_eps=2.0**-8,
    ),
    torch.float16: Tolerance(
        1e-3,
        1e-5,
        "P rounded to fp16 for the PV dot: 2u = 2^-10 of sum(p|v|)/sum(p) "
        "(error_scale), plus the table's output rounding",
        compute_eps=2.0**-10,
    ),
}
# Triton's interpreter truncates float32 -> bf16: P and out each lose up to a full ulp (2u), one-sided
_INTERPRETER_TOLERANCE = {
    torch.bfloat16: Tolerance(
        1.6e-2,
        1e-5,
        "interpreter truncation: P to bf16 off by up to 2u = 2^-7 of "
        "sum(p|v|)/sum(p) (error_scale), out by two bf16 ulps",
        compute_eps=2.0**-7,
    ),
}


def loaded_bounds(inputs: dict) -> dict[str, tuple[int, int]]:
    """What the kernels load, by the op's contract: token offsets within q, key counts within a row of the block
    table, physical pages within the cache."""
    bs = inputs["k_cache"].shape[-3]
    return {
        "cu_seqlens_q_ptr": (0, inputs["q"].shape[0]),
        "seqused_k_ptr": (0, inputs["block_table"].shape[1] * bs),
        "block_table_ptr": (0, inputs["k_cache"].shape[0] - 1),
    }


SPEC = OpSpec(
    name="paged_attention",
    fn=paged_attention,
    make_inputs=make_inputs,
    call=call,
    reference=reference,
    error_scale=error_scale,
    boundary=_BOUNDARY,
    sweep_shape=sweep_shape,
    sweep_series=sweep_series,
    large=_LARGE,
    work=work,
    dtypes=(torch.float16, torch.bfloat16),
    families=("randn", "near_max", "constant"),
    tolerance=_TOLERANCE,
    interpreter_tolerance=_INTERPRETER_TOLERANCE,
    loaded_bounds=loaded_bounds,
    oracle_inputs=oracle_inputs,
    peers={"vllm": peers.vllm, "fa3": peers.fa3},
    speed_of_light={"sdpa": peers.sdpa},
    not_compilable="its reference reads sequence lengths on the host and loops over them (a graph break per batch "
    "layout), so torch.compile of it is no peer; sdpa is the dense speed-of-light",
    description="varlen attention over a paged KV cache (decode, prefill, mixed; GQA, causal, window, softcap, "
    "sinks, fp8 cache)",
)
