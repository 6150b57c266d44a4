"""Input families: data that breaks kernels which only ever saw ``randn``.

Each family is defined per row (the last dimension):

randn         standard normal.
near_max      |x| uniform in [0.5, 0.9] of the dtype's largest finite value, random signs. In float16 that is
              ~33000..59000: squares and sums of squares overflow anything narrower than float32.
tiny          |x| uniform in [0.01, 2] times the dtype's smallest normal: subnormals and the smallest normals.
constant      every element of a row equal (row 0 all zeros): zero variance.
outlier       randn with one element per row at +-min(0.5 * max, 1e6).
cancellation  a large per-row mean (+-1000) with a small spread (0.01): sums that cancel.
nonfinite     randn with one NaN, one +inf and one -inf per row (rows shorter than 3 get what fits).

``Fill`` makes these on any device; on ``device="meta"`` it only allocates, so any size is free.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..spec import FAMILIES


def _finfo(dtype: torch.dtype) -> torch.finfo:
    return torch.finfo(dtype)


class Fill:
    """The ``fill`` an OpSpec's ``make_inputs`` receives: ``fill(size, dtype, family=None)``."""

    def __init__(self, family: str = "randn", device: torch.device | str = "cpu", seed: int = 0):
        if family not in FAMILIES:
            raise ValueError(f"unknown input family {family!r}; known: {', '.join(FAMILIES)}")
        self.family = family
        self.device = torch.device(device)
        self.generator = None if self.device.type == "meta" else torch.Generator(self.device).manual_seed(seed)

    def _randn(self, size, dtype=torch.float32) -> torch.Tensor:
        return torch.randn(size, dtype=dtype, device=self.device, generator=self.generator)

    def _rand(self, size, dtype=torch.float32) -> torch.Tensor:
        return torch.rand(size, dtype=dtype, device=self.device, generator=self.generator)

    def _signs(self, size) -> torch.Tensor:
        return torch.where(self._rand(size) < 0.5, -1.0, 1.0)

    def __call__(self, size: Sequence[int], dtype: torch.dtype, *, family: str | None = None) -> torch.Tensor:
        size = tuple(int(s) for s in size)
        if self.device.type == "meta":
            return torch.empty(size, dtype=dtype, device=self.device)
        fam = family or self.family
        if fam not in FAMILIES:
            raise ValueError(f"unknown input family {fam!r}; known: {', '.join(FAMILIES)}")
        if fam == "randn":
            return self._randn(size).to(dtype)
        return getattr(self, "_" + fam)(size, dtype).to(dtype)

    def _near_max(self, size, dtype):
        fmax = _finfo(dtype).max
        # float64 so 0.9 * float32's max does not round past it
        return (self._rand(size, torch.float64) * 0.4 + 0.5) * fmax * self._signs(size).double()

    def _tiny(self, size, dtype):
        tiny = _finfo(dtype).tiny
        return (self._rand(size, torch.float64) * 1.99 + 0.01) * tiny * self._signs(size).double()

    def _constant(self, size, dtype):
        if not size:
            return self._randn(size)
        rows = self._randn(size[:-1] + (1,))
        if rows.numel():
            rows.view(-1)[0] = 0.0
        return rows.expand(size).contiguous()

    def _outlier(self, size, dtype):
        x = self._randn(size)
        if x.numel():
            big = min(0.5 * _finfo(dtype).max, 1e6)
            col = torch.randint(0, size[-1], size[:-1] + (1,), device=self.device, generator=self.generator)
            x.scatter_(-1, col, big * self._signs(size[:-1] + (1,)))
        return x

    def _cancellation(self, size, dtype):
        if not size:
            return self._randn(size)
        mean = 1000.0 * self._signs(size[:-1] + (1,))
        return mean + 0.01 * self._randn(size)

    def _nonfinite(self, size, dtype):
        x = self._randn(size)
        if x.numel():
            n = size[-1]
            specials = torch.tensor([float("nan"), float("inf"), float("-inf")][:n], device=self.device)
            # three distinct columns per row: the first k of a random permutation of the row's columns
            cols = torch.rand(size, device=self.device, generator=self.generator).argsort(dim=-1)[..., : len(specials)]
            x.scatter_(-1, cols, specials.expand(*size[:-1], len(specials)).contiguous())
        return x

    def randint(self, low: int, high: int, size: Sequence[int], dtype: torch.dtype = torch.int64) -> torch.Tensor:
        size = tuple(int(s) for s in size)
        if self.device.type == "meta":
            return torch.empty(size, dtype=dtype, device=self.device)
        return torch.randint(low, high, size, device=self.device, generator=self.generator).to(dtype)

    def randperm(self, n: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        if self.device.type == "meta":
            return torch.empty((n,), dtype=dtype, device=self.device)
        return torch.randperm(n, device=self.device, generator=self.generator).to(dtype)


def MetaFill(family: str = "randn") -> Fill:
    """A Fill that only allocates on ``device="meta"`` (what ``tritonkit check`` builds inputs with)."""
    return Fill(family, "meta")
