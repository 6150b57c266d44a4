"""Guard regions: catch a kernel that writes outside its tensors or overwrites its inputs.

During one validated call every tensor the op sees lives inside a larger buffer: the inputs are copied into one,
and what the op allocates (``torch.empty``, ``zeros``, ``full`` and their ``_like``/``new_`` forms) is placed in
one as it is made. The bytes before and after each tensor's storage hold a known pattern; after the call a changed
byte there is a write out of bounds (a store without its mask), reported with the tensor's name and the element
offset of the first changed byte. Inputs the op does not own (not in ``OpSpec.inplace``) are compared with a copy
taken before the call (inputs up to ``COPY_LIMIT``). Writes that land past the guard are not seen: the guard is as
large as the tensor, at least 64 KiB, at most 64 MiB, which covers the overrun of a missing mask on the last block
of any sane tile size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# 0xFF bytes are NaN in every float dtype: an unmasked load past an input reads poison, and shows in the result
INPUT_PATTERN = 0xFF
# another byte for what the op allocates: a copy kernel that loads an input's guard and stores it past its output
# writes 0xFF bytes, which must not pass for the output's untouched guard
ALLOC_PATTERN = 0xA5
_ALIGN = 512  # the guard keeps each tensor's address at the same alignment as the allocator's (512 on CUDA)
# inputs past this are neither copied into guards nor compared with a copy: the large shape space (tensors past
# 2^31 elements) would need twice its GPU memory again, and offsets that overflow land far past any guard anyway
COPY_LIMIT = 1 << 30


def guard_bytes(nbytes: int) -> int:
    g = min(max(nbytes, 64 << 10), 64 << 20)
    return -(-g // _ALIGN) * _ALIGN


@dataclasses.dataclass(eq=False)
class Guarded:
    """A tensor's storage placed at ``lo`` bytes into ``base`` (uint8), guarded on both sides by ``pattern``."""

    base: torch.Tensor
    lo: int
    span: int  # bytes of the guarded storage
    pattern: int
    element_size: int
    name: str = ""

    def storage_ptr(self) -> int:
        return self.base.untyped_storage().data_ptr()

    def breach(self) -> str | None:
        """The first out-of-bounds write, described, or None when both guards are intact."""
        before = self.base[: self.lo].ne(self.pattern).nonzero()
        after = self.base[self.lo + self.span :].ne(self.pattern).nonzero()
        es = self.element_size
        if after.numel():
            off = (self.span + int(after[0, 0])) // es
            return f"written out of bounds at element offset {off} (its storage holds {self.span // es} elements)"
        if before.numel():
            # the changed byte nearest the tensor: where an off-by-one at the start lands
            off = -((self.lo - int(before[-1, 0]) + es - 1) // es)
            return f"written out of bounds at element offset {off}, before its first element"
        return None


def _as_bytes(storage: torch.UntypedStorage, device: torch.device) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=device).set_(storage, 0, (storage.nbytes(),), (1,))


def _guarded_base(nbytes: int, pattern: int, device: torch.device) -> tuple[torch.Tensor, int]:
    g = guard_bytes(nbytes)
    base = torch.empty(g + nbytes + g, dtype=torch.uint8, device=device)
    base[:g].fill_(pattern)
    base[g + nbytes :].fill_(pattern)
    return base, g


def _view(base: torch.Tensor, lo: int, t: torch.Tensor) -> torch.Tensor:
    es = t.element_size()
    out = torch.empty(0, dtype=t.dtype, device=t.device)
    return out.set_(base.untyped_storage(), lo // es + t.storage_offset(), t.size(), t.stride())


def _plain(t: Any) -> bool:
    return type(t) is torch.Tensor and t.device.type != "meta" and not t.requires_grad


def guard_inputs(inputs: Mapping[str, Any]) -> tuple[dict[str, Any], list[Guarded]]:
    """``inputs`` with every tensor moved into a guarded copy of its storage (views of one storage stay views of
    one copy), and the guards."""
    out = dict(inputs)
    copies: dict[Any, Guarded] = {}
    for k, t in inputs.items():
        if not _plain(t) or t.untyped_storage().nbytes() > COPY_LIMIT:
            continue
        st = t.untyped_storage()
        # empty storages may share the null address: each gets its own
        key = st.data_ptr() if st.nbytes() else ("empty", k)
        g = copies.get(key)
        if g is None:
            base, lo = _guarded_base(st.nbytes(), INPUT_PATTERN, t.device)
            base[lo : lo + st.nbytes()].copy_(_as_bytes(st, t.device))
            g = Guarded(base, lo, st.nbytes(), INPUT_PATTERN, t.element_size(), k)
            copies[key] = g
        elif k not in g.name.split(", "):
            g.name += f", {k}"
        out[k] = _view(g.base, g.lo, t)
    return out, list(copies.values())


_EMPTY = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")
_FILLED = ("zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full")
_FACTORIES = {getattr(torch, n, None) for n in _EMPTY + _FILLED} | {
    getattr(torch.Tensor, n, None) for n in _EMPTY + _FILLED
}
_FACTORIES.discard(None)
_EMPTY_FNS = {getattr(torch, n, None) for n in _EMPTY} | {getattr(torch.Tensor, n, None) for n in _EMPTY}


class GuardAllocations(TorchFunctionMode):
    """While active, every non-empty tensor made by a torch factory function lives inside a guarded buffer."""

    def __init__(self):
        super().__init__()
        self.guards: list[Guarded] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        r = func(*args, **kwargs)
        if func not in _FACTORIES or "out" in kwargs or not _plain(r) or r.numel() == 0:
            return r
        span = r.untyped_storage().nbytes()
        base, lo = _guarded_base(span, ALLOC_PATTERN, r.device)
        t = _view(base, lo, r)
        if func not in _EMPTY_FNS:
            t.copy_(r)
        self.guards.append(Guarded(base, lo, span, ALLOC_PATTERN, r.element_size()))
        return t


def name_allocations(guards: Iterable[Guarded], outputs: Mapping[str, Any]) -> None:
    """Name each unnamed guard after the output that lives in it, else as a buffer the op allocated."""
    by_ptr = {t.untyped_storage().data_ptr(): k for k, t in outputs.items() if isinstance(t, torch.Tensor)}
    for g in guards:
        if not g.name:
            g.name = by_ptr.get(g.storage_ptr(), f"a {g.span}-byte buffer the op allocated")


def changed_inputs(before: Mapping[str, torch.Tensor], after: Mapping[str, Any]) -> list[str]:
    """The inputs whose elements differ, bit for bit, from their copy taken before the call: each named with its
    first changed element."""
    out = []
    for k, old in before.items():
        new = after[k]
        if old.numel() == 0:
            continue
        a = old.reshape(-1).contiguous().view(torch.uint8).reshape(old.numel(), -1)
        b = new.reshape(-1).contiguous().view(torch.uint8).reshape(old.numel(), -1)
        diff = a.ne(b).any(dim=1).nonzero()
        if diff.numel():
            flat = int(diff[0, 0])
            idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(old.shape)))
            out.append(
                f"input {k} was overwritten: element {idx} (flat offset {flat}) changed, and "
                f"{diff.shape[0]} elements in all"
            )
    return out
