"""paged_attention's launch grids: the prefill grid's query tiles (sequence s's first tile at (cu[s] + s * (BLOCK_Q -
1)) // BLOCK_Q) cover every query row of every sequence exactly once, inside q, whatever the batch; the prefill
merge (a program a query row, or row slices with few splits) and the decode merge (a program a query token) write
every row they own."""

import random

import pytest
import torch
import triton
import triton.language as tl
from conftest import DEVICE

from tritonkit.ops import get_spec, paged_attention
from tritonkit.ops.paged_attention import api, config
from tritonkit.ops.paged_attention.kernel import _find_seq, _prefill_tile
from tritonkit.spec import Shape
from tritonkit.testing import Fill
from tritonkit.testing.metric import compare
from tritonkit.spec import upcast

SPEC = get_spec("paged_attention")


@triton.jit
def _count_rows_kernel(
    count_ptr,
    cu_seqlens_q_ptr,
    num_seqs,
    num_kv_heads,
    num_tokens,
    decode_max_q,
    BLOCK_Q: tl.constexpr,
    BLOCK_Q_PAD: tl.constexpr,
):
    # the prefill kernel's and the prefill merge's prologue (program -> query tile and KV head -> sequence -> rows
    # owned), adding 1 at every (token, KV head) row it would store
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    pid_q = pid // num_kv_heads
    seq = _find_seq(cu_seqlens_q_ptr, pid_q, num_seqs, BLOCK_Q)
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_end = tl.load(cu_seqlens_q_ptr + seq + 1)
    t0, mine = _prefill_tile(pid_q, seq, q_start, q_end, num_tokens, decode_max_q, BLOCK_Q)
    offs = tl.arange(0, BLOCK_Q_PAD)
    tok = t0 + offs
    # where(), not `mine & ...`: Triton 3.9's interpreter makes a scalar-born i1 & a block an int32 block
    mask = tl.where(mine, (offs < BLOCK_Q) & (tok < q_end - q_start), False)
    tl.atomic_add(count_ptr + (q_start + tok) * num_kv_heads + pid % num_kv_heads, 1, mask=mask)


# guard rows on each side of the counted rows: a write outside [0, num_tokens) lands there
GUARD = 64


def _count_rows(cu: list[int], num_tokens: int, block_q: int, decode_max_q: int = 0, kv_heads: int = 2):
    """Writes of each (token, KV head) row by the prefill grid over this batch, [num_tokens, kv_heads], and the
    number of writes outside q."""
    num_seqs = len(cu) - 1
    tiles = config.prefill_grid_tiles(num_seqs, num_tokens, block_q)
    count = torch.zeros((num_tokens + 2 * GUARD) * kv_heads, dtype=torch.int32, device=DEVICE)
    cu_t = torch.tensor(cu, dtype=torch.int32, device=DEVICE)
    _count_rows_kernel[(tiles * kv_heads,)](
        count[GUARD * kv_heads :],
        cu_t,
        num_seqs,
        kv_heads,
        num_tokens,
        decode_max_q,
        BLOCK_Q=block_q,
        BLOCK_Q_PAD=triton.next_power_of_2(block_q),
    )
    count = count.view(-1, kv_heads).cpu()
    outside = int(count[:GUARD].sum() + count[GUARD + num_tokens :].sum())
    return count[GUARD : GUARD + num_tokens], outside


def _owned(cu: list[int], num_tokens: int, decode_max_q: int) -> torch.Tensor:
    """1 at each row of a sequence the prefill path takes (more than decode_max_q tokens, inside q), else 0."""
    want = torch.zeros(num_tokens, dtype=torch.int32)
    for a, b in zip(cu, cu[1:]):
        if b - a > decode_max_q and 0 <= a and b <= num_tokens:
            want[a:b] = 1
    return want


def _cu(lengths, start: int = 0) -> list[int]:
    cu = [start]
    for n in lengths:
        cu.append(cu[-1] + n)
    return cu


# query lengths around BLOCK_Q = 16: empty sequences (first, last, in runs), exact multiples, one past, many short
_BATCHES = {
    "one-exact": [32],
    "one-past": [33],
    "one-short": [5],
    "multiples": [16, 32, 16, 48],
    "one-past-each": [17, 33, 1, 49],
    "one-short-each": [15, 31, 47],
    "empty-around": [0, 16, 0, 0, 17, 0],
    "empties-only-one-row": [0, 0, 0, 1, 0, 0],
    "many-short": [1, 2, 3, 1, 1, 5, 1, 2, 1, 1, 3, 1, 1, 1, 2, 1, 4, 1],
    "mixed": [70, 1, 16, 0, 2, 17, 15, 0, 9, 64],
}


@pytest.mark.parametrize("start, pad", [(0, 0), (3, 0), (40, 7)], ids=["flush", "lead", "lead-and-tail"])
@pytest.mark.parametrize("name", list(_BATCHES))
def test_the_prefill_tiles_cover_every_row_once(name, start, pad):
    # rows before cu_seqlens_q[0] and past cu_seqlens_q[-1] (CUDA-graph padding) belong to no sequence
    lengths = _BATCHES[name]
    cu = _cu(lengths, start)
    num_tokens = cu[-1] + pad
    for block_q in (16, 1, 9):
        for decode_max_q in (0, 4):
            count, outside = _count_rows(cu, num_tokens, block_q, decode_max_q)
            want = _owned(cu, num_tokens, decode_max_q)
            assert outside == 0
            assert torch.equal(count, want[:, None].expand_as(count)), (block_q, decode_max_q, count[:, 0].tolist())


def test_the_prefill_tiles_cover_random_batches_once():
    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(1, 16)
        lengths = [rng.choice((0, 0, 1, 2, 15, 16, 17, 31, 32, 33, rng.randint(0, 80))) for _ in range(n)]
        cu = _cu(lengths, rng.choice((0, 0, 5)))
        num_tokens = cu[-1] + rng.choice((0, 0, 3, 40))
        block_q = rng.choice((2, 9, 16, 32))
        count, outside = _count_rows(cu, num_tokens, block_q)
        assert outside == 0 and torch.equal(count, _owned(cu, num_tokens, 0)[:, None].expand_as(count)), cu


def test_no_cu_seqlens_q_makes_the_prefill_tiles_write_outside_q():
    # negative, past-the-end and unsorted offsets: no row lands outside [0, num_tokens); sorted ones still cover
    # every sequence that lies inside q exactly once (the others are dropped)
    rng = random.Random(1)
    for i in range(30):
        num_tokens = rng.randint(1, 60)
        cu = [rng.randint(-20, num_tokens + 20) for _ in range(rng.randint(2, 12))]
        if i % 2:
            cu.sort()
        for block_q in (1, 9, 16):
            count, outside = _count_rows(cu, num_tokens, block_q)
            assert outside == 0, (cu, block_q)
            if i % 2:
                assert torch.equal(count, _owned(cu, num_tokens, 0)[:, None].expand_as(count)), (cu, block_q)


def test_the_prefill_grid_is_exact_for_one_sequence_and_never_above_the_old_bound():
    for block_q in (1, 2, 9, 16, 64, 128):
        for num_tokens in range(1, 300):
            assert config.prefill_grid_tiles(1, num_tokens, block_q) == -(-num_tokens // block_q)
            for num_seqs in (2, 3, 7, 64, 1000):
                tiles = config.prefill_grid_tiles(num_seqs, num_tokens, block_q)
                assert tiles <= num_seqs + num_tokens // block_q


# --- the op, end to end: NaN-poisoned out, forced KV splits, varlen batches --------------------------------------

_KW = ("cu_seqlens_q", "seqused_k", "block_table", "max_seqlen_q", "max_seqlen_k", "window_size", "softcap", "sinks")


def _call(inp: dict, q: torch.Tensor, out: torch.Tensor, **changes) -> None:
    kw = {k: inp[k] for k in _KW + ("causal", "k_scale", "v_scale") if k in inp}
    kw.update(changes)
    paged_attention(q, inp["k_cache"], inp["v_cache"], out=out, **kw)


def _assert_matches(out: torch.Tensor, inp: dict) -> None:
    ref_in = upcast(inp)
    ref = SPEC.reference(ref_in, inp["q"].dtype)["out"]
    c = compare(out, ref, SPEC.tolerance_for(inp["q"].dtype), SPEC.error_scale(ref_in)["out"])
    assert c.passed, c.describe()


@pytest.fixture
def launches(monkeypatch):
    """The call's launches (kernel, grid, constexprs), each run as usual."""
    seen = []
    real = api.launch

    def launch(kernel, grid, args, constexprs, *a, **k):
        seen.append((kernel, grid, constexprs))
        return real(kernel, grid, args, constexprs, *a, **k)

    monkeypatch.setattr(api, "launch", launch)
    return seen


def _grids(launches, kernel) -> list:
    return [(g, c) for k, g, c in launches if k is kernel]


_HEADS = dict(num_heads=4, num_kv_heads=2, head_dim=64, block_size=16)
# prefill with 16-token tiles (32 rows at group 2) beside the decode kernel's sequences of at most 8 tokens:
# sequences of 0, 16 (one tile), 17 (one row past it), 15, 32 and 48 tokens, a decode sequence of one
_VARLEN = [
    Shape(num_seqs=9, q_len=(16, 0, 17, 32, 0, 15, 9, 1, 48), context=(300, 7, 0, 40, 3, 250, 17, 200, 100), **_HEADS),
    # one chunk of exactly two tiles, and one of a row more
    Shape(num_seqs=1, q_len=32, context=600, **_HEADS),
    Shape(num_seqs=1, q_len=33, context=600, **_HEADS),
    # GQA 7, head_dim 80: 4-token tiles of 28 rows (a 32-row tile with 4 rows no query holds)
    Shape(num_seqs=3, q_len=(13, 0, 12), context=(400, 9, 60), num_heads=7, num_kv_heads=1, head_dim=80, block_size=16),
    # window, softcap, sinks and an fp8 cache through the split merge
    Shape(num_seqs=3, q_len=(17, 1, 16), context=(300, 90, 350), window_left=100, softcap=8.0, sinks=1, **_HEADS),
    Shape(num_seqs=2, q_len=(16, 20), context=(300, 280), kv_dtype="fp8", **_HEADS),
]


@pytest.mark.parametrize(
    ("forced_splits", "merge_rows"),
    [(False, None), (True, 1), (True, config.PREFILL_MERGE_ROWS)],
    ids=["one-split", "splits-row-merge", "splits-sliced-merge"],
)
@pytest.mark.parametrize("shape", _VARLEN, ids=[s.id for s in _VARLEN])
def test_the_tight_prefill_grid_writes_every_row(monkeypatch, launches, shape, forced_splits, merge_rows):
    # max_seqlen_q 100 (an upper bound, as the contract allows) keeps these short queries on the prefill kernel:
    # past the wide decode rows; rows before and after the batch (graph padding) must stay as they were
    if forced_splits:
        monkeypatch.setattr(config, "PREFILL_MIN_KEYS_PER_SPLIT", 64)
        monkeypatch.setattr(config, "PREFILL_SMALL_MIN_KEYS_PER_SPLIT", 64)
        # a program a row from 2 splits, or row slices up to the cap: both merges over the same splits
        monkeypatch.setattr(config, "PREFILL_MERGE_PARALLEL_SPLITS", 2 if merge_rows == 1 else config.MAX_SPLITS + 1)
    inp = SPEC.make_inputs(shape, torch.bfloat16, Fill("randn", DEVICE, 0))
    lead, tail = 5, 3
    q = inp["q"]
    q_pad = torch.cat([torch.randn(lead, *q.shape[1:]), q.cpu().float(), torch.randn(tail, *q.shape[1:])])
    q_pad = q_pad.to(q.dtype).to(DEVICE)
    out = torch.full_like(q_pad, float("nan"))
    out[:lead] = 7.0
    out[lead + q.shape[0] :] = 7.0
    _call(inp, q_pad, out, cu_seqlens_q=inp["cu_seqlens_q"] + lead, max_seqlen_q=100)
    _assert_matches(out[lead : lead + q.shape[0]], inp)
    assert bool((out[:lead] == 7.0).all()) and bool((out[lead + q.shape[0] :] == 7.0).all())

    ((grid, ce),) = _grids(launches, api._paged_attention_prefill_kernel)
    kv_heads = shape["num_kv_heads"]
    assert grid[0] == config.prefill_grid_tiles(shape["num_seqs"], q_pad.shape[0], ce["BLOCK_Q"]) * kv_heads
    assert (grid[1] > 1) is forced_splits
    merges = _grids(launches, api._paged_attention_prefill_merge_kernel)
    if forced_splits:
        ((mgrid, mce),) = merges
        assert mce["ROWS"] == merge_rows and mce["MAX_SPLITS"] == config.MAX_SPLITS
        assert mgrid == (grid[0], -(-ce["BLOCK_Q"] * ce["GROUP"] // merge_rows))
    else:
        assert not merges


# decode sequences of several query tokens (speculative decoding) whose KV splits the decode merge joins: varlen
# (the merge's programs for tokens past a sequence's query store nothing), group 2 and 4, and the wide decode rows
_SPEC_DECODE = [
    Shape(num_seqs=3, q_len=(4, 1, 3), context=(600, 900, 700), **_HEADS),
    Shape(num_seqs=4, q_len=(4, 2, 4, 3), context=(900, 500, 33, 700), num_heads=8, num_kv_heads=2, head_dim=64,
          block_size=16, sinks=1),
    Shape(num_seqs=2, q_len=(3, 26), context=(900, 300), window_left=500, softcap=8.0, **_HEADS),
    Shape(num_seqs=2, q_len=(2, 4), context=(1100, 700), kv_dtype="fp8", **_HEADS),
]  # fmt: skip


@pytest.mark.parametrize("shape", _SPEC_DECODE, ids=[s.id for s in _SPEC_DECODE])
def test_the_decode_merge_writes_every_query_token(launches, shape):
    inp = SPEC.make_inputs(shape, torch.bfloat16, Fill("randn", DEVICE, 0))
    out = torch.full_like(inp["q"], float("nan"))
    _call(inp, inp["q"], out)
    _assert_matches(out, inp)
    ((grid, ce),) = _grids(launches, api._paged_attention_decode_kernel)
    ((mgrid, mce),) = _grids(launches, api._paged_attention_merge_kernel)
    assert grid[2] > 1 and not _grids(launches, api._paged_attention_prefill_kernel)
    # a program a (sequence, query head, token) the batch can hold
    assert mgrid == (shape["num_seqs"], shape["num_heads"], min(ce["MAX_Q"], inp["max_seqlen_q"]))


def test_the_decode_merge_runs_one_program_a_head_at_plain_decode(launches):
    shape = Shape(num_seqs=2, q_len=1, context=(1000, 700), **_HEADS)
    inp = SPEC.make_inputs(shape, torch.bfloat16, Fill("randn", DEVICE, 0))
    out = torch.full_like(inp["q"], float("nan"))
    _call(inp, inp["q"], out)
    _assert_matches(out, inp)
    ((mgrid, mce),) = _grids(launches, api._paged_attention_merge_kernel)
    assert mgrid == (2, 4, 1) and mce["MAX_Q"] == 8


def test_the_merge_grids_stay_within_cuda_limits():
    # grid[1] and grid[2] of the merges: a tile's rows (prefill) and a decode program's tokens, for every group
    for group in (1, 2, 3, 4, 7, 8, 16, 64, 300, 4096, 65535):
        for head_dim in (64, 128, 256):
            for max_q in (1, 4, 20, 64, 500):
                pre = config.prefill_config(group, head_dim, 2, 1, max_q, max_q, 1, 20000, 132)
                assert 1 <= pre.block_q * group <= min(pre.block_m, max(256, group)) <= 65535
                dec = config.decode_config(group, head_dim, 2, 1, 1, 20000, 132, max_q)
                assert 1 <= dec.max_q <= config.DECODE_WIDE_ROWS <= 65535


def test_the_prefill_merge_is_a_programmatic_dependent_launch_where_the_decode_merge_is(monkeypatch):
    # sm_90+ CUDA devices: the row-parallel prefill merge launches with launch_pdl and its PDL branch (the wait on
    # the prefill grid); the prefill kernel itself is a plain launch, whose programs trigger the merge as they exit.
    # The row-slice merge (few splits) is a plain launch everywhere.
    from compile_keys import Recorder

    monkeypatch.setattr(config, "PREFILL_MIN_KEYS_PER_SPLIT", 64)
    shape = Shape(num_seqs=1, q_len=32, context=600, **_HEADS)
    names = ("_paged_attention_prefill_kernel", "_paged_attention_prefill_merge_kernel")
    for pdl, parallel_from in ((False, 2), (True, 2), (True, config.MAX_SPLITS + 1)):
        monkeypatch.setattr(config, "PREFILL_MERGE_PARALLEL_SPLITS", parallel_from)
        recs = {n: Recorder() for n in names}
        for n, rec in recs.items():
            monkeypatch.setattr(api, n, rec)
        monkeypatch.setattr(config, "merge_pdl", lambda device, pdl=pdl: pdl)
        inp = SPEC.make_inputs(shape, torch.bfloat16, Fill("randn", DEVICE, 0))
        _call(inp, inp["q"], torch.empty_like(inp["q"]))
        ((grid, _, pre_kw),) = recs[names[0]].launches
        ((merge_grid, _, merge_kw),) = recs[names[1]].launches
        assert grid[1] > 1 and merge_grid[0] == grid[0]
        assert not pre_kw.get("launch_pdl", False)
        chained = pdl and merge_kw["ROWS"] == 1
        assert merge_kw["ROWS"] == (1 if parallel_from == 2 else config.PREFILL_MERGE_ROWS)
        assert merge_kw["PDL"] is chained and merge_kw.get("launch_pdl", False) is chained
