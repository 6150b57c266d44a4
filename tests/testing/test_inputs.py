import pytest
import torch

from tritonkit.spec import FAMILIES
from tritonkit.testing import Fill, MetaFill


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("family", [f for f in FAMILIES])
def test_family_shape_dtype_and_determinism(family, dtype):
    a = Fill(family, "cpu", seed=3)((5, 33), dtype)
    b = Fill(family, "cpu", seed=3)((5, 33), dtype)
    assert a.shape == (5, 33) and a.dtype == dtype
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_near_max_is_near_max():
    x = Fill("near_max", "cpu")((64, 64), torch.float16).float()
    assert torch.isfinite(x).all()
    assert x.abs().min() >= 0.5 * 65504 * 0.999 and x.abs().max() <= 0.9 * 65504 * 1.001
    # squares overflow fp16
    assert torch.isinf((x.half() * x.half())).all()


def test_tiny_has_subnormals():
    x = Fill("tiny", "cpu")((64, 64), torch.float32)
    tiny = torch.finfo(torch.float32).tiny
    assert (x.abs() < tiny).any() and (x != 0).all() and (x.abs() <= 2 * tiny).all()


def test_constant_rows_and_zero_row():
    x = Fill("constant", "cpu")((4, 16), torch.float32)
    assert (x == x[:, :1]).all() and (x[0] == 0).all()


def test_outlier_one_per_row():
    x = Fill("outlier", "cpu")((8, 32), torch.float16)
    assert ((x.float().abs() > 1000).sum(-1) == 1).all()


def test_cancellation_large_mean_small_spread():
    x = Fill("cancellation", "cpu")((4, 256), torch.float32)
    assert (x.mean(-1).abs() > 999).all() and (x.std(-1) < 0.02).all()


@pytest.mark.parametrize("width", [2, 3, 64])
def test_nonfinite_has_nan_and_infs_in_every_row(width):
    x = Fill("nonfinite", "cpu")((16, width), torch.float32)
    assert torch.isnan(x).sum(-1).eq(1).all() and torch.isposinf(x).sum(-1).eq(1).all()
    if width >= 3:
        assert torch.isneginf(x).sum(-1).eq(1).all()


def test_meta_fill_allocates_only():
    f = MetaFill("near_max")
    x = f((1 << 20, 1 << 12), torch.bfloat16)
    assert x.device.type == "meta" and x.shape == (1 << 20, 1 << 12)
    assert f.randint(0, 10, (5,), torch.int32).device.type == "meta"


def test_unknown_family():
    with pytest.raises(ValueError, match="unknown input family"):
        Fill("bogus")
