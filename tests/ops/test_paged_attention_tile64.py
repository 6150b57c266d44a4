"""config.DECODE_TILE64 (TRITONKIT_DECODE_TILE64=1, off by default): 64-key decode tiles at 8 warps where the split
rule leaves at most DECODE_PROGRAMS_PER_SM programs a SM. The plan it makes, and its outputs against the reference
with the switch on."""

import pytest
import torch

from tritonkit.ops import get_spec
from tritonkit.ops.paged_attention import config
from tritonkit.spec import Shape
from tritonkit.testing import assert_valid

SPEC = get_spec("paged_attention")


@pytest.fixture
def tile64(monkeypatch):
    # (the tests' monkeypatch empties the memoized launch plans after a patch of config)
    monkeypatch.setattr(config, "DECODE_TILE64", True)


def _dec(num_seqs, keys, kv_bytes=2, sms=132):
    return config.launch_plan(4, 128, kv_bytes, num_seqs, num_seqs, 8, 1, keys, sms).decode


def test_off_by_default_keeps_32_key_tiles_at_4_warps():
    if config.DECODE_TILE64:
        pytest.skip("TRITONKIT_DECODE_TILE64 is set in this process")
    for b, keys in ((1, 1024), (8, 1024), (16, 1024), (2, 4096), (64, 1024)):
        d = _dec(b, keys)
        assert (d.block_n, d.num_warps) == (32, 4), (b, keys, d)


def test_the_plan_takes_64_key_tiles_where_programs_are_few_and_long(tile64):
    # Llama-3-8B heads on 132 SMs: (num_seqs, keys) -> (block_n, warps, splits); the splits are the 32-key rule's
    want = {
        (1, 1024): (32, 4, 32),  # one 32-key tile a program: unchanged
        (2, 1024): (32, 4, 16),  # two
        (4, 1024): (64, 8, 8),
        (8, 1024): (64, 8, 4),
        (16, 1024): (64, 8, 2),
        (32, 1024): (64, 8, 1),
        (64, 1024): (32, 4, 1),  # 512 programs: 4 a SM, as before
        (1, 4096): (64, 8, 32),
        (2, 4096): (64, 8, 16),
        (4, 4096): (64, 8, 8),
        (8, 4096): (32, 4, 8),  # 512 programs of 16 tiles
        (16, 4096): (32, 4, 4),
        (1, 32768): (32, 4, 64),
    }
    for (b, keys), (bn, warps, splits) in want.items():
        d = _dec(b, keys)
        assert (d.block_n, d.num_warps, d.num_splits) == (bn, warps, splits), (b, keys, d)
        # every split holds a tile, and the tiles cover the keys
        assert (d.num_splits - 1) * d.tiles_per_split * d.block_n < keys <= d.num_splits * d.tiles_per_split * d.block_n
    # fp8 caches keep their 64-key tiles at 4 warps
    d = _dec(8, 1024, kv_bytes=1)
    assert (d.block_n, d.num_warps) == (64, 4)


_SHAPES = [
    # one split and several, contexts that end inside a tile and inside a page, an empty sequence
    Shape(num_seqs=3, q_len=1, context=(700, 129, 0), num_heads=8, num_kv_heads=2, head_dim=128, block_size=16),
    Shape(num_seqs=2, q_len=1, context=(1000, 517), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16),
    # speculative tokens (causal rows inside the tile), pages that split a 64-key tile 8 ways and pages of 48
    Shape(num_seqs=3, q_len=(2, 4, 1), context=(300, 90, 257), num_heads=8, num_kv_heads=2, head_dim=64, block_size=8),
    Shape(num_seqs=2, q_len=(1, 3), context=(400, 333), num_heads=4, num_kv_heads=1, head_dim=80, block_size=48),
    # the features: left window (its own split ranges), softcap, sinks, non-causal two-sided window
    Shape(
        num_seqs=2,
        q_len=1,
        context=(600, 301),
        num_heads=8,
        num_kv_heads=2,
        head_dim=64,
        block_size=16,
        window_left=200,
        softcap=8.0,
        sinks=1,
    ),
    Shape(
        num_seqs=2,
        q_len=(1, 2),
        context=(500, 250),
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        block_size=16,
        causal=0,
        window_left=300,
        window_right=3,
    ),
]


@pytest.mark.parametrize("splits", [1, 2], ids=["one-split", "two-splits"])
@pytest.mark.parametrize("shape", _SHAPES, ids=[s.id for s in _SHAPES])
def test_tile64_decode_matches_the_reference(monkeypatch, tile64, shape, splits):
    from tritonkit.ops.paged_attention import api

    # SMs for `splits` KV splits at DECODE_PROGRAMS_PER_SM programs a SM: the switch's largest grid
    pairs = shape["num_seqs"] * shape["num_kv_heads"]
    sms = pairs * splits // config.DECODE_PROGRAMS_PER_SM
    monkeypatch.setattr(config, "num_sms", lambda device, sms=sms: sms)
    launched = []
    real = api.launch
    monkeypatch.setattr(api, "launch", lambda kernel, *a, **k: launched.append((kernel, a)) or real(kernel, *a, **k))
    for dtype, family in ((torch.bfloat16, "randn"), (torch.float16, "near_max"), (torch.bfloat16, "constant")):
        assert_valid(SPEC, shape, dtype, family)
    dec = [a for k, a in launched if k is api._paged_attention_decode_kernel]
    assert dec and all(a[2]["BLOCK_N"] == 64 and a[3] == 8 for a in dec), [(a[0], a[2]["BLOCK_N"], a[3]) for a in dec]
    assert {a[0][2] for a in dec} == {splits}
    assert any(k is api._paged_attention_merge_kernel for k, _ in launched) == (splits > 1)
