"""A Fill that only allocates on ``device="meta"``; used when :mod:`tritonkit.testing.inputs` is unavailable."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class MetaFill:
    device = torch.device("meta")
    family = "randn"
    generator = None

    def __call__(self, size: Sequence[int], dtype: torch.dtype, *, family: str | None = None) -> torch.Tensor:
        return torch.empty(tuple(int(s) for s in size), dtype=dtype, device=self.device)

    def randint(self, low: int, high: int, size: Sequence[int], dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.empty(tuple(int(s) for s in size), dtype=dtype, device=self.device)

    def randperm(self, n: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.empty((int(n),), dtype=dtype, device=self.device)
