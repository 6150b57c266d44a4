"""The README's test command runs a fast tier: each parametrized grid sampled, every op kept (tests/conftest.py)."""

import types

from conftest import FAST_PARAMS, _fast_tier


def _item(name, pid):
    return types.SimpleNamespace(nodeid=f"tests/t.py::{name}[{pid}]", callspec=types.SimpleNamespace(id=pid))


def test_a_grid_keeps_its_ends_and_evenly_between():
    items = [_item("test_grid", f"n={n}") for n in range(10)]
    kept, dropped = _fast_tier(items)
    assert len(kept) == FAST_PARAMS and kept[0].callspec.id == "n=0" and kept[-1].callspec.id == "n=9"
    assert len(kept) + len(dropped) == 10


def test_every_op_named_in_a_grid_is_kept():
    ops = ["rms_norm", "silu_and_mul", "rotary_embedding", "paged_attention", "fused_moe", "topk_softmax"]
    items = [_item("test_each_op", f"{op}-{k}") for op in ops for k in range(3)]
    kept, _ = _fast_tier(items)
    assert {op for op in ops if any(i.callspec.id.startswith(op) for i in kept)} == set(ops)


def test_small_grids_and_plain_tests_are_untouched():
    plain = types.SimpleNamespace(nodeid="tests/t.py::test_plain", callspec=None)
    small = [_item("test_small", f"k={k}") for k in range(FAST_PARAMS)]
    kept, dropped = _fast_tier([plain, *small])
    assert kept == [plain, *small] and dropped == []
