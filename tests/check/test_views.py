"""Which bytes two views of one storage share: exact, against brute force."""

import itertools
import random

import pytest
import torch

from tritonkit.check.capture.views import common_byte, view_of


def _bytes(t) -> set[int]:
    es, out = t.element_size(), set()
    for idx in itertools.product(*[range(n) for n in t.shape]):
        e = t.storage_offset() + sum(i * s for i, s in zip(idx, t.stride()))
        out.update(range(e * es, e * es + es))
    return out


def test_agrees_with_brute_force_on_random_strided_views():
    rng = random.Random(0)
    base = torch.empty(600, device="meta")
    as_bytes = base.view(torch.uint8)
    for _ in range(400):
        pair = []
        for src in (base, base if rng.random() < 0.7 else as_bytes):
            nd = rng.randint(1, 3)
            sizes = [rng.randint(1, 5) for _ in range(nd)]
            strides = [rng.randint(0, 12) for _ in range(nd)]
            pair.append(torch.as_strided(src, sizes, strides, rng.randint(0, 40)))
        a, b = pair
        got = common_byte(view_of(a), view_of(b))
        shared = _bytes(a) & _bytes(b)
        assert (got is not None) == bool(shared), (a.shape, a.stride(), b.shape, b.stride())
        if got is not None:
            # the first byte of an element of `a` that `b` shares bytes with
            assert any(x in shared for x in range(got, got + a.element_size()))


@pytest.mark.parametrize("tokens", [1, 7, 65536])
def test_fused_qkv_column_slices_share_nothing(tokens):
    qkv = torch.empty(tokens, (32 + 8 + 8) * 128, dtype=torch.bfloat16, device="meta")
    q, k, v = qkv[:, :4096], qkv[:, 4096:5120], qkv[:, 5120:]
    views = [view_of(t.view(tokens, -1, 128)) for t in (q, k, v)]
    assert all(common_byte(a, b) is None for a, b in itertools.combinations(views, 2))


def test_a_buffer_and_itself_shifted_by_one_column_share_almost_everything():
    x = torch.empty(100, 64, device="meta")
    a, b = view_of(x[:, :-1]), view_of(x[:, 1:])
    byte = common_byte(a, b)
    assert a.index(byte) == (0, 1) and b.index(byte) == (0, 0)
