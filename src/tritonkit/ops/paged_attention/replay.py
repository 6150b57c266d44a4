"""paged_attention's launches remembered per checked layout, repeated with only a call's tensors.

``check_args`` keys a layout on every argument's dtype, shape, strides and device and every scalar with its type;
every launch argument but the tensors (grids, strides, scaled scalars, constexprs, the plan) is a function of that
key, of config's names and of api's kernels. A call whose layout recorded its launches (:class:`Layout`) repeats
them through ``_launch.launch_bound`` with the call's tensors and fresh split scratch, skipping the plan, the argument
building and the specialization keys (docs/notes/paged-attention-host.md). What the key leaves out is checked per
call: each tensor's 16-byte alignment (Triton specializes on it) here, hooks, the current device and stream, a
cleared Triton cache in ``launch_bound``. ``tritonkit.ops.clear_caches`` (and ``overrides``, which changes config's
names) empties the memo.

A repeat hands the launchers data pointers as ints, which Triton's CUDA launcher takes as they are: a tensor would
cost a ``data_ptr`` call and a ``cuPointerGetAttribute`` per pointer argument (20 at a split decode), and the key
already holds every tensor's device, checked when the layout was recorded. The Hopper prefill takes K and V as TMA
descriptors: a repeat builds them from the call's caches (the launcher encodes each into a CUtensorMap, as it does
under ``JITFunction.run``).
"""

from __future__ import annotations

from functools import reduce
from operator import itemgetter, or_

import torch

from .. import _launch

# the caller's tensors (out included) lead a call's slots; the decode and the prefill split scratch follow, then
# the persistent prefill's tile counter (COUNTER_SLOT)
CALL_SLOTS = 10
_SCRATCH_SLOTS = 7
COUNTER_SLOT = CALL_SLOTS + 6


class Layout:
    """check_args' memo entry for one accepted layout: the byte extents of out and the tensors it reads
    (``_checks.extents``), the call's scalars as check_args resolved them (api.Args' fields from max_seqlen_q) and
    the launches a call recorded for it (None until then)."""

    __slots__ = ("extents", "scalars", "replay")

    def __init__(self, extents: tuple[int, ...], scalars: tuple):
        self.extents = extents
        self.scalars = scalars
        self.replay: Replay | None = None


class Replay:
    """One call's launches, all held by the fast path (:class:`_launch.Bound`), and how to fill each launch's
    leading pointers from a call's tensors: the call slots that hold a tensor for this key (with their 16-byte
    alignment when recorded), the split scratch of both paths as one allocation at 16-byte offsets, and what stays
    the same for every call with this key (the None slots, the unused partials stand-in of a path without splits)."""

    __slots__ = (
        "bounds", "fronts", "device", "pick", "aligned", "all_aligned", "scratch_elems", "offsets", "fixed", "descs",
        "counter",
    )  # fmt: skip

    def __init__(
        self, bounds: tuple, fronts: tuple, scratch: tuple, device: torch.device, slots: tuple, counter: bool = False
    ):
        self.bounds, self.device = bounds, device
        present = [i for i in range(CALL_SLOTS) if slots[i] is not None]
        self.pick = itemgetter(*present)
        self.aligned = tuple(slots[i].data_ptr() % 16 == 0 for i in present)
        self.all_aligned = all(self.aligned)
        # per call: the present tensors' pointers, the scratch parts' pointers, then the fixed values; each slot's
        # place in that list
        where = {slot: n for n, slot in enumerate(present)}
        offsets, elems = [], 0
        for path, sizes in enumerate(scratch):
            first = CALL_SLOTS + 3 * path
            for k, n in enumerate(_parts(sizes) if sizes is not None else ()):
                where[first + k] = len(present) + len(offsets)
                offsets.append(4 * elems)
                elems += n
        # a zeroed tile counter a call, after the scratch parts
        self.counter = counter
        if counter:
            where[COUNTER_SLOT] = len(present) + len(offsets)
        # the fixed values: None (a slot without a tensor), the unused partials of a path without splits, the
        # unused counter
        fixed = len(present) + len(offsets) + counter
        for slot in range(CALL_SLOTS + _SCRATCH_SLOTS):
            if slot not in where:
                where[slot] = fixed if slot < CALL_SLOTS else fixed + 1 if slot < COUNTER_SLOT else fixed + 2
        self.scratch_elems, self.offsets = elems, tuple(offsets)
        self.fixed = (None, _unused_partials(device).data_ptr(), unused_counter(device).data_ptr())
        self.fronts = tuple(itemgetter(*(where[s] for s in _slots_of(f))) for f in fronts)
        # fronts that build TMA descriptors (the Hopper prefill's): (launch, the front, its descriptor places)
        self.descs = tuple((i, f, f.descriptors) for i, f in enumerate(fronts) if hasattr(f, "descriptors"))

    def __call__(self, tensors: tuple) -> bool:
        """Launch on the caller's ten tensors (out included); False, launching nothing, where a launch must take
        the normal path (a pointer of another alignment class, a hook, ...)."""
        # each tensor's own data_ptr (a subclass may override it, as the launcher would have called it)
        ptrs = [t.data_ptr() for t in self.pick(tensors)]
        if self.all_aligned:
            if reduce(or_, ptrs) & 15:
                return False
        elif tuple(p % 16 == 0 for p in ptrs) != self.aligned:
            return False
        scratch = None
        if self.scratch_elems:
            # referenced until the launches are queued; the caching allocator orders any reuse after them
            scratch = torch.empty(self.scratch_elems, dtype=torch.float32, device=self.device)
            b = scratch.data_ptr()
            if b & 15:
                return False
            ptrs += [b + o for o in self.offsets]
        ctr = None
        if self.counter:
            # referenced until the launches are queued, as the scratch
            ctr = tile_counter(self.device)
            ptrs.append(ctr.data_ptr())
        ptrs += self.fixed
        fronts = [f(ptrs) for f in self.fronts]
        for i, front, places in self.descs:
            # a descriptor holds its cache's tensor (the launcher reads its base pointer, shape and strides)
            args = list(fronts[i])
            for pos, slot in places:
                args[pos] = front.descriptor(slot, tensors[slot])
            fronts[i] = tuple(args)
        return _launch.launch_bound(self.bounds, fronts)


def _slots_of(front) -> tuple:
    """The slot indices a front over a call's slots picks, in order: an itemgetter's, or (a front that builds
    descriptors) its ``pick``'s, the descriptors' places holding their cache's slot."""
    return getattr(front, "pick", front)(range(CALL_SLOTS + _SCRATCH_SLOTS))


def _parts(sizes: tuple) -> tuple:
    """A path's three split partials (accumulators, maxima, sums) of ``sizes = (acc elements, row elements)``, in
    float32 elements, each rounded up to 16 bytes so that the next part starts aligned."""
    acc, rows = (-(-n // 4) * 4 for n in sizes)
    return acc, rows, rows


# one element per device and dtype for the arguments a launch never touches, allocated once, not per call (an
# allocation is a few µs of host time): float32 for the partial buffers of a one-split launch, int32 for the tile
# counter of a launch that takes no tiles from one (each keeps the kernel's signature to one pointer type)
_UNUSED: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def _unused(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    t = _UNUSED.get((device, dtype))
    if t is None:
        t = _UNUSED[device, dtype] = torch.zeros(1, dtype=dtype, device=device)
    return t


def _unused_partials(device: torch.device) -> torch.Tensor:
    return _unused(device, torch.float32)


def unused_counter(device: torch.device) -> torch.Tensor:
    return _unused(device, torch.int32)


def tile_counter(device: torch.device) -> torch.Tensor:
    """A call's own tile counter, zero: the persistent prefill's programs take tiles from it (kernel_hopper's
    DYNAMIC). Per call, from the caching allocator, so launches on other streams never share one."""
    return torch.zeros(1, dtype=torch.int32, device=device)


def scratch(sizes: tuple | None, device: torch.device) -> tuple:
    """A path's split partials (accumulators, maxima, sums) of ``sizes = (acc elements, row elements)``, flat (the
    kernels take their pointers only); the unused stand-in for None."""
    if sizes is None:
        u = _unused_partials(device)
        return (u, u, u)
    acc, pad, rows = _parts(sizes)
    # one allocation split at 16-byte (4-element) boundaries: 2.4 against 4.0 us for three on a CPU
    return torch.empty(acc + pad + rows, dtype=torch.float32, device=device).split_with_sizes((acc, pad, rows))
