"""paged_attention's launches remembered per checked layout, repeated with only a call's tensors.

``check_args`` keys a layout on every argument's dtype, shape, strides and device and every scalar with its type;
every launch argument but the tensors (grids, strides, scaled scalars, constexprs, the plan) is a function of that
key, of config's names and of api's kernels. A call whose layout recorded its launches (:class:`Layout`) repeats
them through ``_launch.launch_bound`` with the call's tensors and fresh split scratch, skipping the plan, the argument
building and the specialization keys (docs/notes/paged-attention-host.md). What the key leaves out is checked per
call: each tensor's 16-byte alignment (Triton specializes on it) here, hooks, the current device and stream, a
cleared Triton cache in ``launch_bound``. config's and api's module classes empty the memo when a name is rebound.
"""

from __future__ import annotations

from operator import itemgetter

import torch

from .. import _launch


class Layout:
    """check_args' memo entry for one accepted layout: the launches a call recorded for it (None until then)."""

    __slots__ = ("replay",)

    def __init__(self):
        self.replay: Replay | None = None


def _aligned(tensors: tuple) -> tuple:
    return tuple(t.data_ptr() % 16 == 0 for t in tensors)


class Replay:
    """One call's launches, all held by the fast path (:class:`_launch.Bound`), with what picks each launch's leading
    tensors from the call's slots, the split scratch to allocate, and the slots' 16-byte alignment when recorded."""

    __slots__ = ("bounds", "fronts", "scratch", "device", "present", "aligned")

    def __init__(self, bounds: tuple, fronts: tuple, scratch: tuple, device: torch.device, slots: tuple):
        self.bounds, self.fronts, self.scratch, self.device = bounds, fronts, scratch, device
        # None slots (no sinks, no fp8 scales) stay None for every call with this key; the unused partials stand-in
        # (a path without splits) is one tensor for good
        fixed = {i for p, s in enumerate(scratch) if s is None for i in range(10 + 3 * p, 13 + 3 * p)}
        self.present = itemgetter(*(i for i, t in enumerate(slots) if t is not None and i not in fixed))
        self.aligned = _aligned(self.present(slots))

    def __call__(self, tensors: tuple) -> bool:
        """Launch on the caller's ten tensors (out included); False, launching nothing, where a launch must take
        the normal path (a pointer of another alignment class, a hook, ...)."""
        slots = tensors + scratch(self.scratch[0], self.device) + scratch(self.scratch[1], self.device)
        if _aligned(self.present(slots)) != self.aligned:
            return False
        return _launch.launch_bound(self.bounds, [f(slots) for f in self.fronts])


# one float32 element per device, for the partial buffers a one-split launch never touches: allocated once, not
# per call (an allocation is a few µs of host time); float32 so the kernel's signature does not change
_UNUSED_PARTIALS: dict[torch.device, torch.Tensor] = {}


def _unused_partials(device: torch.device) -> torch.Tensor:
    t = _UNUSED_PARTIALS.get(device)
    if t is None:
        t = _UNUSED_PARTIALS[device] = torch.empty(1, dtype=torch.float32, device=device)
    return t


def scratch(sizes: tuple | None, device: torch.device) -> tuple:
    """A path's split partials (accumulators, maxima, sums) of ``sizes = (acc elements, row elements)``, flat (the
    kernels take their pointers only); the unused stand-in for None."""
    if sizes is None:
        u = _unused_partials(device)
        return (u, u, u)
    acc, rows = sizes
    # one allocation split at 16-byte (4-element) boundaries: 2.4 against 4.0 us for three on a CPU
    acc, pad = -(-acc // 4) * 4, -(-rows // 4) * 4
    return torch.empty(acc + pad + rows, dtype=torch.float32, device=device).split_with_sizes((acc, pad, rows))
