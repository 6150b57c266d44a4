import pytest
import torch
from conftest import DEVICE

import tritonkit.ops.moe_align_block_size.config as config
from tritonkit.ops import poison_outputs
from tritonkit.ops.moe_align_block_size.api import moe_align_block_size
from tritonkit.ops.moe_align_block_size.reference import moe_align_block_size_reference as reference
from tritonkit.ops.moe_align_block_size.spec import SPEC
from tritonkit.testing import assert_valid


@pytest.mark.parametrize("shape", SPEC.boundary, ids=lambda s: s.id)
def test_boundary(shape):
    assert_valid(SPEC, shape, torch.bfloat16, "randn", device=DEVICE)


def _routed(t, k, e, dtype=torch.int32, seed=0):
    g = torch.Generator(DEVICE).manual_seed(seed)
    return torch.rand(t, e, generator=g, device=DEVICE).argsort(dim=1)[:, :k].to(dtype).contiguous()


def _align(ids, bs, e, expert_map=None):
    with poison_outputs():
        out = moe_align_block_size(ids, bs, e, expert_map)
    ref = reference(ids, bs, e, expert_map)
    for name, o, r in zip(("sorted_token_ids", "expert_ids", "num_tokens_post_padded"), out, ref):
        assert o.dtype == torch.int32 and o.shape == r.shape, name
        assert torch.equal(o, r), f"{name}: {o.tolist()} != {r.tolist()}"
    return out


def _check_layout(ids, bs, e, out, expert_map=None):
    """The contract, read from the outputs alone."""
    sorted_ids, expert_ids, post = out
    flat = ids.reshape(-1).long()
    numel = flat.numel()
    total = int(post[0])
    assert len(sorted_ids) == min(numel * bs, numel + e * (bs - 1))
    assert len(expert_ids) == -(-len(sorted_ids) // bs)
    assert total % bs == 0 and total <= len(sorted_ids)
    assert (sorted_ids[total:] == numel).all() and (expert_ids[total // bs :] == -1).all()
    valid = (flat >= 0) & (flat < e)
    real = sorted_ids[:total][sorted_ids[:total] != numel].long()
    assert sorted(real.tolist()) == torch.nonzero(valid).view(-1).tolist()  # each valid slot once, nothing else
    counts = torch.bincount(flat[valid], minlength=e)
    expected_total = int(((counts + bs - 1) // bs * bs).sum())
    assert total == expected_total
    for b in range(total // bs):
        block = sorted_ids[b * bs : (b + 1) * bs].long()
        slots = block[block != numel]
        assert slots.numel() and (slots[1:] > slots[:-1]).all()  # every block opens with a slot; ascending
        expert = int(flat[slots[0]])
        assert (flat[slots] == expert).all()
        want = expert if expert_map is None else int(expert_map[expert])
        assert int(expert_ids[b]) == want
    if expert_map is None:
        assert (expert_ids[: total // bs - 1] <= expert_ids[1 : total // bs]).all()  # expert order


@pytest.mark.parametrize(
    "t,k,e,bs", [(1, 8, 256, 16), (5, 2, 8, 4), (32, 8, 64, 16), (33, 8, 64, 16), (70, 6, 60, 7), (3, 4, 4, 1)]
)
@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_layout(t, k, e, bs, ids_dtype):
    ids = _routed(t, k, e, ids_dtype)
    _check_layout(ids, bs, e, _align(ids, bs, e))


def test_paths_agree_at_every_chunk_boundary(monkeypatch):
    # shrink the tiles so the three-launch path runs many chunks and a multi-tile scan on interpreter-sized inputs
    monkeypatch.setattr(config, "SMALL_MAX", 16)
    monkeypatch.setattr(config, "CHUNK", 32)
    monkeypatch.setattr(config, "BLOCK_C", 2)
    for t in (2, 3, 4, 5, 9, 17):
        ids = _routed(t, 8, 16, seed=t)
        _check_layout(ids, 4, 16, _align(ids, 4, 16))
    hot = torch.full((20, 8), 3, dtype=torch.int32, device=DEVICE)
    _check_layout(hot, 16, 16, _align(hot, 16, 16))


def test_one_program_path_with_fewer_slots_than_experts():
    ids = torch.tensor([[7, 3]], dtype=torch.int32, device=DEVICE)
    s, b, n = _align(ids, 16, 256)
    assert len(s) == 32 and len(b) == 2 and int(n[0]) == 32
    assert s[:16].tolist() == [1] + [2] * 15 and s[16:].tolist() == [0] + [2] * 15
    assert b.tolist() == [3, 7]


def test_expert_map_keeps_blocks_of_other_ranks():
    e = 8
    expert_map = torch.tensor([-1, 0, -1, 1, 2, -1, 3, 4], dtype=torch.int32, device=DEVICE)
    ids = _routed(40, 4, e)
    out = _align(ids, 16, e, expert_map)
    _check_layout(ids, 16, e, out, expert_map)
    s, b, n = out
    assert (b[: int(n[0]) // 16] == -1).sum() > 0  # blocks of experts 0, 2, 5 listed with -1
    plain = _align(ids, 16, e)
    assert torch.equal(s, plain[0]) and torch.equal(n, plain[2])  # the map changes expert_ids only


def test_one_expert_and_topk_equal_experts():
    one = torch.zeros(5, 1, dtype=torch.int32, device=DEVICE)
    _check_layout(one, 4, 1, _align(one, 4, 1))
    ids = _routed(6, 8, 8)
    _check_layout(ids, 16, 8, _align(ids, 16, 8))


@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_no_tokens(ids_dtype):
    s, b, n = moe_align_block_size(torch.empty(0, 8, dtype=ids_dtype, device=DEVICE), 16, 64)
    assert s.shape == (0,) and b.shape == (0,) and n.tolist() == [0]
    assert s.dtype == b.dtype == n.dtype == torch.int32


@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_out_of_range_ids_are_dropped(ids_dtype):
    ids = _routed(40, 8, 32, ids_dtype)
    ids[0, 0], ids[3, 5], ids[39, 7] = -1, 32, 1000
    if ids_dtype == torch.int64:
        ids[7, 2] = 2**32 + 1  # must not alias expert 1
    out = _align(ids, 16, 32)
    _check_layout(ids, 16, 32, out)
    dropped = {0, 3 * 8 + 5, 39 * 8 + 7} | ({7 * 8 + 2} if ids_dtype == torch.int64 else set())
    assert not dropped & set(out[0].tolist())
    everything_bad = torch.full((3, 2), -1, dtype=ids_dtype, device=DEVICE)
    s, b, n = _align(everything_bad, 4, 8)
    assert (s == 6).all() and (b == -1).all() and n.tolist() == [0]


@pytest.mark.parametrize(
    "args,exc,name",
    [
        ((torch.zeros(4, 2), 16, 8), TypeError, "topk_ids"),  # float ids
        ((torch.zeros(4, 2, dtype=torch.int16), 16, 8), TypeError, "topk_ids"),
        ((torch.zeros(8, dtype=torch.int32), 16, 8), ValueError, "topk_ids"),  # rank 1
        ((torch.zeros(2, 8, dtype=torch.int32).t(), 16, 8), ValueError, "topk_ids"),  # not contiguous
        (([[1, 2]], 16, 8), TypeError, "topk_ids"),
        ((torch.zeros(4, 2, dtype=torch.int32), 0, 8), ValueError, "block_size"),
        ((torch.zeros(4, 2, dtype=torch.int32), 16.0, 8), TypeError, "block_size"),
        ((torch.zeros(4, 2, dtype=torch.int32), True, 8), TypeError, "block_size"),
        ((torch.zeros(4, 2, dtype=torch.int32), 16, 0), ValueError, "num_experts"),
        ((torch.zeros(4, 2, dtype=torch.int32), 16, 5000), ValueError, "num_experts"),
        ((torch.zeros(4, 2, dtype=torch.int32), 16, 8, torch.zeros(8, dtype=torch.int64)), TypeError, "expert_map"),
        ((torch.zeros(4, 2, dtype=torch.int32), 16, 8, torch.zeros(7, dtype=torch.int32)), ValueError, "expert_map"),
        ((torch.zeros(4, 2, dtype=torch.int32), 16, 8, torch.zeros(2, 8, dtype=torch.int32)), ValueError, "expert_map"),
        (
            (torch.zeros(4, 2, dtype=torch.int32), 16, 8, torch.zeros(16, dtype=torch.int32)[::2]),
            ValueError,
            "expert_map",
        ),
    ],
    ids=[
        "float-ids",
        "int16-ids",
        "rank1-ids",
        "strided-ids",
        "list-ids",
        "block-0",
        "block-float",
        "block-bool",
        "experts-0",
        "experts-too-many",
        "map-int64",
        "map-short",
        "map-rank2",
        "map-strided",
    ],
)
def test_bad_input(args, exc, name):
    with pytest.raises(exc, match=rf"^{name} "):
        moe_align_block_size(*args)


def test_sweep_shape():
    from tritonkit.models import MODELS

    assert SPEC.sweep_shape(MODELS["llama3-8b"], 16) is None
    shapes = [SPEC.sweep_shape(MODELS["deepseek-v3"], t) for t in (1, 16, 4096)]
    assert [s["block_size"] for s in shapes] == [16, 16, 64]


def test_torch_compile_records_one_custom_op():
    # fullgraph with dynamic shapes fails on any .item() or data-dependent size: the op has none
    targets = []

    def backend(gm, example_inputs):
        targets.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    f = torch.compile(lambda ids: moe_align_block_size(ids, 16, 8), backend=backend, fullgraph=True, dynamic=True)
    ids = _routed(5, 2, 8)
    out = f(ids)
    assert "tritonkit.moe_align_block_size" in targets
    for o, r in zip(out, reference(ids, 16, 8)):
        assert torch.equal(o, r)


def test_ids_are_checked_on_request(monkeypatch):
    ids = _routed(5, 2, 8)
    ids[3, 1] = -1
    monkeypatch.setenv("TRITONKIT_CHECK_INDICES", "1")
    with pytest.raises(ValueError, match=r"^topk_ids must hold expert ids in \[0, 8\), got -1 at \(3, 1\)"):
        moe_align_block_size(ids, 16, 8)
    monkeypatch.setenv("TRITONKIT_CHECK_INDICES", "0")
    s, _, n = moe_align_block_size(ids, 16, 8)
    assert int(n) == 16 * len(set(ids.view(-1).tolist()) - {-1}) and (s == ids.numel()).sum() > 0


@pytest.mark.parametrize("bad", [4, 99, -2])
def test_expert_map_is_checked_on_request(monkeypatch, bad):
    # unchecked, a map entry outside [-1, num_experts) reaches expert_ids as it is (documented); checked, it is named
    ids = _routed(5, 2, 4)
    emap = torch.tensor([0, -1, 1, 2], dtype=torch.int32, device=DEVICE)
    emap[int(ids[0, 0])] = bad
    _, experts, _ = moe_align_block_size(ids, 16, 4, emap)
    assert bad in experts.tolist()
    monkeypatch.setenv("TRITONKIT_CHECK_INDICES", "1")
    with pytest.raises(
        ValueError,
        match=rf"^expert_map must hold local expert indices \(-1: another rank's\) in \[-1, 4\), got {bad} at "
        rf"\({int(ids[0, 0])},\)",
    ):
        moe_align_block_size(ids, 16, 4, emap)


def test_batches_past_the_kernels_int32_positions_are_refused():
    # 2^30 slots: the padded length fits int32, a fill position a grid stride past it would not
    ids = torch.empty(2**27, 8, dtype=torch.int32, device="meta")
    with pytest.raises(ValueError, match=r"^topk_ids has 1073741824 slots: .* int32 positions would overflow"):
        moe_align_block_size(ids, 16, 256)
    from tritonkit.ops.moe_align_block_size.api import _int32_span

    # DeepSeek-V3 at 65536 tokens x top-8 is far inside
    assert _int32_span(65536 * 8, 64, 256) < 2**22
