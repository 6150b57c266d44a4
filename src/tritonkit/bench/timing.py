"""Timing one callable over rotating input sets: CUDA-graph replay and plain eager calls.

Cold L2. ``do_bench_cudagraph`` replays one input set, which then sits in L2 for every replay after the first.
Here the caller hands in ``sets``, enough distinct input sets that together they touch more than the L2 (see
``rotation_sets``); all of them go into one graph, so by the time a set comes round again the L2 has turned
over. Where that would take more than ``MAX_SETS`` sets (decode shapes of a few KB), an ``L2Flush`` runs
before each replay, outside the timed region, and every set is still read cold once per replay. Each set comes
from the spec's ``make_inputs``, so an op that writes in place gets a valid input every call.

Graph timing: one graph holds one call per set; a replay is timed with CUDA events and divided by the number of
calls. That is kernel time with the launch gaps of a graph (about 1 us a kernel on an H200) and no Python.
Eager timing: the same calls issued from Python back to back, events around the loop: what a user without graphs
pays, host overhead included when the host is the slower side.
On a CPU (tests only) there is no graph and eager timing uses the host clock.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .stats import Timing, repeats_for, summarize

#: Rotation sets together must touch at least this many L2s, so a set is evicted before it comes round again.
L2_FACTOR = 2.0
#: Most sets one graph rotates through (a capture costs host time per call). Fewer sets than L2_FACTOR needs (the
#: smallest decode shapes) get an L2 flush before each replay instead, so each set is still read cold.
MAX_SETS = 2048

#: Wall time one measurement aims to fill (repeats adapt to it within [MIN_REPEATS, MAX_REPEATS]).
BUDGET_S = 0.05
MIN_REPEATS = 5
MAX_REPEATS = 50
#: GPU-busy time before timed replays, so clocks have ramped up from idle (a few ms of ramp seen on H200-class
#: parts); at most MAX_WARM_REPLAYS replays.
WARM_S = 0.03
MAX_WARM_REPLAYS = 2000
#: Most calls in one eager repeat: at small shapes eager time is host-bound, and the host pays per call.
EAGER_MAX_CALLS = 256

Fn = Callable[[dict], Any]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _warmup(fn: Fn, sets: Sequence[dict], device: torch.device, calls: int = 2) -> None:
    """First calls on a side stream, as graph capture wants (lazy allocations and handles made outside it)."""
    if device.type != "cuda":
        for inp in sets[:calls]:
            fn(inp)
        return
    s = torch.cuda.Stream(device)
    s.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(s):
        for i in range(calls):
            fn(sets[i % len(sets)])
    torch.cuda.current_stream(device).wait_stream(s)
    torch.cuda.synchronize(device)


def time_graph(
    fn: Fn,
    sets: Sequence[dict],
    device: torch.device,
    *,
    repeats: int | None = None,
    before_replay: Callable[[], None] | None = None,
) -> Timing:
    """Capture one call per set into one CUDA graph; time its replays; per-call median, min and max.

    ``before_replay`` runs before each replay outside the timed region (the floor uses it to flush the L2).
    Outputs of every call stay alive through the capture, so each call writes its own memory, as rotation
    intends, instead of the graph pool handing one call's freed output to the next.
    """
    if device.type != "cuda":
        raise RuntimeError("CUDA-graph timing needs a CUDA device")
    _warmup(fn, sets, device)
    check_capturable(fn, sets[0])
    graph = torch.cuda.CUDAGraph()
    keep = []
    with torch.cuda.graph(graph):
        for inp in sets:
            keep.append(fn(inp))
    try:
        n = len(sets)
        if before_replay:
            before_replay()
        graph.replay()
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if before_replay:
            before_replay()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        one = max(start.elapsed_time(end) * 1e-3, 1e-6)
        if repeats is None:
            repeats = repeats_for(one, BUDGET_S, MIN_REPEATS, MAX_REPEATS)
        # the GPU idles while the host compiles and checks between points and its clocks drop; replay for
        # WARM_S first so the timed replays run at the clocks a busy server sees
        for _ in range(min(int(WARM_S / one) + 1, MAX_WARM_REPLAYS)):
            if before_replay:
                before_replay()
            graph.replay()
        torch.cuda.synchronize(device)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
        for start, end in events:
            if before_replay:
                before_replay()
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize(device)
        return summarize([s.elapsed_time(e) * 1e-3 / n for s, e in events])
    finally:
        del keep
        del graph
        gc.collect()


class NotCapturable(RuntimeError):
    """The callable synchronizes with the host (``.item()``, a boolean mask, ``nonzero``): no graph can hold it."""


#: What PyTorch's sync debug mode raises on a host sync ("called a synchronizing CUDA operation").
SYNC_ERROR = "synchronizing CUDA operation"


def check_capturable(fn: Fn, inputs: dict) -> None:
    """One call with PyTorch's sync debug mode set to error: a host sync inside would abort a capture (and can
    leave the context unusable), so it is found here first and reported as NotCapturable. Any other error (out of
    memory, a launch failure) propagates as itself."""
    prev = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn(inputs)
    except RuntimeError as e:
        if SYNC_ERROR not in str(e):
            raise
        raise NotCapturable(f"synchronizes with the host, so no CUDA graph: {str(e).splitlines()[0][:200]}") from e
    finally:
        torch.cuda.set_sync_debug_mode(prev)
    torch.cuda.synchronize()


def rotation_sets(
    bytes_per_set: int,
    l2_bytes: int,
    *,
    factor: float = L2_FACTOR,
    max_sets: int = MAX_SETS,
    mem_per_set: int | None = None,
    mem_budget: int | None = None,
) -> int:
    """How many input sets a graph rotates through so that together they touch ``factor`` L2s.

    ``bytes_per_set`` is what one call touches (the work model's bytes); ``mem_per_set`` what one set allocates
    (it can be more: a KV cache is larger than the rows one call writes). At least one set; at most ``max_sets``
    and as many as fit in ``mem_budget``.
    """
    if bytes_per_set <= 0:
        raise ValueError(f"bytes_per_set must be positive, got {bytes_per_set}")
    n = max(1, math.ceil(factor * l2_bytes / bytes_per_set))
    n = min(n, max_sets)
    if mem_budget is not None and mem_per_set:
        n = min(n, max(1, mem_budget // mem_per_set))
    return n


def cold(bytes_per_set: int, n_sets: int, l2_bytes: int, factor: float = L2_FACTOR) -> bool:
    """Whether a rotation of ``n_sets`` alone keeps reads cold: together the sets touch ``factor`` L2s, so each
    set is evicted before it comes round again."""
    return bytes_per_set * n_sets >= factor * l2_bytes


def rotation(
    work_bytes: int,
    l2_bytes: int,
    device: torch.device,
    *,
    max_sets: int,
    mem_per_set: int | None = None,
    mem_budget: int | None = None,
) -> tuple[int, L2Flush | None]:
    """How a point is kept cold: the number of input sets to rotate through (``rotation_sets``), and an L2
    flush to run before each replay when those sets are too few to turn the L2 over themselves (None when they
    are, or off a GPU)."""
    work_bytes = max(work_bytes, 1)
    n = rotation_sets(work_bytes, l2_bytes, max_sets=max_sets, mem_per_set=mem_per_set, mem_budget=mem_budget)
    flush = None if cold(work_bytes, n, l2_bytes) or device.type != "cuda" else L2Flush(device)
    return n, flush


class L2Flush:
    """Reads and writes a buffer of twice the L2 before a replay whose sets together touch too little to turn the
    L2 over themselves: every set is then read cold once per replay, however few bytes it holds.

    Read and write (``add_``), not a write alone: the first ``fill_`` flush of an H200 process left the reads
    that followed warm (the 16-byte floor read 1.02-1.03 us with it, 0.99 with no flush, 1.38 with ``add_``, a
    read-only sum, or a later ``fill_``; docs/notes/data/h200/exp20.json, exp21.json)."""

    def __init__(self, device: torch.device):
        self.device = device
        self._buf: torch.Tensor | None = None

    def __call__(self) -> None:
        if self._buf is None:
            l2 = torch.cuda.get_device_properties(self.device).L2_cache_size
            self._buf = torch.zeros(max(2 * l2, 1 << 20) // 4, dtype=torch.int32, device=self.device)
        self._buf.add_(1)


def time_eager(fn: Fn, sets: Sequence[dict], device: torch.device, *, repeats: int | None = None) -> Timing:
    """Plain calls back to back over the sets (at most EAGER_MAX_CALLS a repeat); per-call median, min, max."""
    use = list(sets[:EAGER_MAX_CALLS])
    _warmup(fn, use, device)

    def one_repeat() -> float:
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for inp in use:
                fn(inp)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e-3 / len(use)
        t0 = time.perf_counter()
        for inp in use:
            fn(inp)
        return (time.perf_counter() - t0) / len(use)

    first = one_repeat()
    if repeats is None:
        repeats = repeats_for(first * len(use), BUDGET_S, MIN_REPEATS, MAX_REPEATS)
    return summarize([one_repeat() for _ in range(repeats)])


#: Rounds of the bench's host-overhead measurement: each provider runs one repeat per round.
HOST_ROUNDS = 7


def _settle(device: torch.device) -> None:
    """After a provider raised: let the device finish what it had queued (an error there is the provider's)."""
    if device.type == "cuda":
        with contextlib.suppress(Exception):
            torch.cuda.synchronize(device)


def _host_warmup(fn: Fn, inputs: dict, device: torch.device, calls: int) -> None:
    for _ in range(min(20, calls)):
        fn(inputs)
    sync(device)


def _host_repeat(fn: Fn, inputs: dict, device: torch.device, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(inputs)
    sync(device)
    return (time.perf_counter() - t0) / calls


def host_overhead(fn: Fn, inputs: dict, device: torch.device, *, calls: int = 1000, repeats: int = 3) -> Timing:
    """Wall time of ``calls`` back-to-back calls on one tiny input set, divided by ``calls``.

    With tiny inputs the device finishes each kernel before the host issues the next, so this is what one call
    costs the host: argument checks, dispatch, launch. Median over ``repeats``.
    """
    _host_warmup(fn, inputs, device, calls)
    return summarize([_host_repeat(fn, inputs, device, calls) for _ in range(repeats)])


def interleaved_host_overhead(
    fns: Sequence[Any], inputs: dict, device: torch.device, *, calls: int = 1000, rounds: int = HOST_ROUNDS
) -> tuple[dict[str, dict], dict[str, str]]:
    """``host_overhead`` of several providers (callables with a ``name``) on the same inputs, their repeats
    interleaved: round after round, one repeat of each. A slow spell of the host (another process, a clock
    change; 58.8 against 37.2 us for the same call in two H200-machine runs) then lands on every provider instead
    of on whichever was being timed, so the comparison holds.

    Returns ``({name: Timing dict}, {name: error})``, medians over rounds: a provider that raises is dropped from
    the later rounds with its error, and the others are still timed."""
    errors: dict[str, str] = {}
    live = []
    for fn in fns:
        try:
            _host_warmup(fn, inputs, device, calls)
            live.append(fn)
        except Exception as e:  # noqa: BLE001 - reported by the caller with the provider's point
            errors[fn.name] = f"{type(e).__name__}: {e}"[:300]
            _settle(device)
    samples: dict[str, list[float]] = {fn.name: [] for fn in live}
    for _ in range(rounds):
        for fn in list(live):
            try:
                samples[fn.name].append(_host_repeat(fn, inputs, device, calls))
            except Exception as e:  # noqa: BLE001 - a provider that fails here is reported by name; the others go on
                errors[fn.name] = f"{type(e).__name__}: {e}"[:300]
                _settle(device)
                live.remove(fn)
                del samples[fn.name]
    return {name: summarize(s).to_dict() for name, s in samples.items()}, errors
