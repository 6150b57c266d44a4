"""The card's speed-of-light, measured on it: copy bandwidth, bf16 matmul rate, and the floor of one launch.

Copy bandwidth comes from an SM-driven Triton copy kernel, not ``Tensor.copy_``: a ``copy_`` captured in a CUDA
graph becomes a memcpy node that runs on the copy engine (2.77 TB/s on an H200 against 4.09 TB/s for a Triton
copy kernel in the same graph timing), and the ops are SM kernels too. Bytes read plus bytes written.

Copy bandwidth and the matmul rate are cached per GPU name and driver in ``~/.cache/tritonkit/ceilings.json``
(``$XDG_CACHE_HOME`` or ``$TRITONKIT_CACHE_DIR`` move it). The floor and the empty launch are cheap and are
measured in every run, so the target formula compares times taken in the same conditions.

``time_size_matched_copy`` is the per-point reference of the sweep: the same kind of copy kernel moving the bytes
of one op point, timed like the op (rotation sets, L2 flush, CUDA graph). The ceiling is what a copy reaches on a
large buffer; this is what a copy reaches at the op's size, ramp-up and tail included.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import pathlib
import statistics

import torch
import triton
import triton.language as tl

from .._env import driver_version
from .records import CopyRef
from .roofline import Ceilings
from .timing import L2Flush, rotation, time_graph

#: Copy size for the bandwidth ceiling: 1 GiB each way, ~20 L2s, ~0.5 ms a copy on an H200.
COPY_BYTES = 1 << 30
#: (BLOCK elements of int32, num_warps) tried for the copy kernel; the best one is the ceiling.
COPY_CONFIGS = ((2048, 4), (4096, 8), (8192, 8), (16384, 16))
#: The size-matched copy's one config (one graph timing a point, not one per config): BLOCK 2048 int32, 4 warps is
#: within 1.2% of the best config on 1 GiB on an H200 (4093 vs 4142 GB/s, in the ceilings details of
#: benchmarks/results/h200/latest/rms_norm.json) and the smallest block of COPY_CONFIGS, so mid sizes get the most
#: programs (2048 at 33.6 MB moved, 15 a SM) where a 16384 block would leave 256 for 132 SMs.
SIZED_COPY_BLOCK = 2048
SIZED_COPY_WARPS = 4
MATMUL_N = 8192
#: Launches per floor graph; each reads its own 16 bytes, 256 bytes from the last.
FLOOR_CALLS = 1024
#: A flushed floor must be this much slower than the same launches reading from L2, or the flush did not work:
#: on an H200 memory adds 0.38 us to the L2-warm 1.00 us (docs/notes/data/h200/exp21.json).
FLOOR_MIN_COLD_US = 0.1
FLOOR_TRIES = 3


#: The size-matched copy reference moves whole vectors of this many bytes (one 16-byte load and store per thread).
COPY_VEC_BYTES = 16


def copy_vectors(work_bytes: int) -> int:
    """16-byte vectors the size-matched copy reads (and then writes) for an op point of ``work_bytes``.

    The copy reads N and writes N bytes with 2N = ``work_bytes``; N is rounded to the nearest whole vector, at
    least one. Elements of int32: four per vector.
    """
    if work_bytes < 0:
        raise ValueError(f"work_bytes must be non-negative, got {work_bytes}")
    return max(1, (work_bytes + COPY_VEC_BYTES) // (2 * COPY_VEC_BYTES))


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@triton.jit(do_not_specialize=["n_vec"])
def _copy_vec_kernel(src_ptr, dst_ptr, n_vec, BLOCK: tl.constexpr):
    # the length in whole 16-byte vectors: the mask is then constant over each four int32, so loads and stores
    # stay 16 bytes wide at every size, and the sweep compiles this once
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    mask = offs < n_vec.to(tl.int64) * 4
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _vec16_copy_kernel(src_ptr, dst_ptr):
    # four int32: one 16-byte vector load and store
    offs = tl.arange(0, 4)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs))


@triton.jit
def _empty_kernel(x_ptr):
    pass


def cache_path() -> pathlib.Path:
    base = os.environ.get("TRITONKIT_CACHE_DIR")
    if base:
        return pathlib.Path(base) / "ceilings.json"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(xdg) / "tritonkit" / "ceilings.json"


@functools.lru_cache(maxsize=1)
def _method() -> str:
    """What the cached numbers were measured with: this module's source (kernels, sizes, configs) and torch (cuBLAS
    for the matmul ceiling). A change to either measures again instead of reusing the old ceilings."""
    h = hashlib.sha256(pathlib.Path(__file__).read_bytes() + torch.__version__.encode())
    return h.hexdigest()[:12]


def cache_key(gpu: str, driver: str) -> str:
    return f"{gpu}|{driver}|{_method()}"


def load_cached(gpu: str, driver: str, path: pathlib.Path | None = None) -> dict | None:
    path = path or cache_path()
    try:
        return json.loads(path.read_text()).get(cache_key(gpu, driver))
    except (OSError, ValueError):
        return None


def store_cached(gpu: str, driver: str, entry: dict, path: pathlib.Path | None = None) -> None:
    path = path or cache_path()
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        data = {}
    data[cache_key(gpu, driver)] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home only costs a re-measurement next time


def measure_copy_gbps(device: torch.device) -> tuple[float, dict]:
    """Best copy bandwidth over COPY_CONFIGS, bytes read + written, CUDA-graph timing of 8 copies a replay."""
    n = COPY_BYTES // 4
    src = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32, device=device)
    dst = torch.empty_like(src)
    per_config = {}
    for block, warps in COPY_CONFIGS:
        grid = (triton.cdiv(n, block),)

        def copy(_inp, block=block, warps=warps, grid=grid):
            _copy_kernel[grid](src, dst, n, BLOCK=block, num_warps=warps)

        t = time_graph(copy, [{}] * 8, device, repeats=10)
        per_config[f"BLOCK={block},num_warps={warps}"] = 2 * COPY_BYTES / (t.median_us * 1e-6) / 1e9
    if not torch.equal(src, dst):
        raise RuntimeError("the copy kernel did not copy: ceiling not trusted")
    return max(per_config.values()), per_config


def time_size_matched_copy(
    work_bytes: int, l2_bytes: int, device: torch.device, *, max_sets: int, mem_budget: int, repeats: int | None = None
) -> CopyRef:
    """Time a Triton copy of N bytes read and N written, 2N = ``work_bytes`` in whole 16-byte vectors, the way an op
    point is timed: rotation sets from ``rotation_sets`` over the copy's own buffers, an L2 flush before each
    replay when they are too few to be ``cold``, CUDA-graph replay through ``time_graph``.

    Returns the time and bandwidth, with ``info`` = ``{bytes (read + written), sets, l2_flush, config, timing}``.
    """
    n_vec = copy_vectors(work_bytes)
    n = n_vec * (COPY_VEC_BYTES // 4)
    moved = 2 * n_vec * COPY_VEC_BYTES
    n_sets, flush = rotation(moved, l2_bytes, device, max_sets=max_sets, mem_per_set=moved, mem_budget=mem_budget)
    g = torch.Generator(device).manual_seed(0)
    sets = [
        {
            "src": torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32, device=device, generator=g),
            "dst": torch.empty(n, dtype=torch.int32, device=device),
        }
        for _ in range(n_sets)
    ]
    grid = (triton.cdiv(n, SIZED_COPY_BLOCK),)

    def copy(inp):
        _copy_vec_kernel[grid](inp["src"], inp["dst"], n_vec, BLOCK=SIZED_COPY_BLOCK, num_warps=SIZED_COPY_WARPS)

    t = time_graph(copy, sets, device, repeats=repeats, before_replay=flush)
    if not (torch.equal(sets[0]["src"], sets[0]["dst"]) and torch.equal(sets[-1]["src"], sets[-1]["dst"])):
        raise RuntimeError("the size-matched copy kernel did not copy: reference not trusted")
    return CopyRef(
        t.median_us,
        moved / (t.median_us * 1e-6) / 1e9,
        {
            "bytes": moved,
            "sets": n_sets,
            "l2_flush": flush is not None,
            "config": f"BLOCK={SIZED_COPY_BLOCK},num_warps={SIZED_COPY_WARPS}",
            "timing": t.to_dict(),
        },
    )


def _matmul_rate(mm, device: torch.device) -> float:
    """TFLOP/s of ``mm()``, a MATMUL_N^3 product: the median of 20 event-timed calls after 3 warm-ups."""
    for _ in range(3):
        mm()
    torch.cuda.synchronize(device)
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        mm()
        e.record()
        times.append((s, e))
    torch.cuda.synchronize(device)
    t = statistics.median(s.elapsed_time(e) * 1e-3 for s, e in times)
    return 2 * MATMUL_N**3 / t / 1e12


def measure_matmul_tflops(device: torch.device) -> float:
    """torch.matmul bf16 MATMUL_N^3 on random data (zeros run faster), median of 20 after 3 warm-ups."""
    g = torch.Generator(device).manual_seed(0)
    a = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16, generator=g)
    b = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16, generator=g)
    rate = _matmul_rate(lambda: a @ b, device)
    a = b = None  # the closure's operands, freed before the cache is emptied
    torch.cuda.empty_cache()
    return rate


def measure_matmul_fp8_tflops(device: torch.device) -> float:
    """``torch._scaled_mm`` float8_e4m3fn MATMUL_N^3 with per-tensor scales and a bf16 result, timed as the bf16
    ceiling; 0 where the card or torch has no fp8 matmul (before sm_89)."""
    if torch.cuda.get_device_capability(device) < (8, 9) or not hasattr(torch, "_scaled_mm"):
        return 0.0
    g = torch.Generator(device).manual_seed(0)
    a = torch.randn(MATMUL_N, MATMUL_N, device=device, generator=g).to(torch.float8_e4m3fn)
    # _scaled_mm takes the second operand column-major
    b = torch.randn(MATMUL_N, MATMUL_N, device=device, generator=g).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device)

    def mm():
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    try:
        mm()
    except RuntimeError:  # a torch build without the fp8 GEMM for this card
        return 0.0
    rate = _matmul_rate(mm, device)
    a = b = None  # the closure's operands, freed before the cache is emptied
    torch.cuda.empty_cache()
    return rate


def measure_floor_us(device: torch.device) -> tuple[float, float]:
    """(floor, empty) in microseconds per launch, CUDA-graph timing.

    Floor: FLOOR_CALLS launches, each copying its own 16 bytes (256 bytes apart), the L2 flushed before each
    replay so every read goes to memory: a launch plus one memory round trip. It is checked against the same
    launches with the L2 warm (FLOOR_MIN_COLD_US). Empty: launches of an empty kernel.
    """
    src = torch.arange(FLOOR_CALLS * 64, dtype=torch.int32, device=device)
    dst = torch.zeros_like(src)
    sets = [{"i": i} for i in range(FLOOR_CALLS)]

    def vec(inp):
        i = inp["i"] * 64
        _vec16_copy_kernel[(1,)](src[i:], dst[i:], num_warps=1)

    def empty(_inp):
        _empty_kernel[(1,)](dst, num_warps=1)

    for _ in range(FLOOR_TRIES):
        # the same launches with the 16 bytes in L2: a floor no slower than that was not read from memory
        warm = time_graph(vec, sets, device, repeats=20).median_us
        floor = time_graph(vec, sets, device, repeats=20, before_replay=L2Flush(device)).median_us
        if floor >= warm + FLOOR_MIN_COLD_US:
            break
    else:
        raise RuntimeError(
            f"the floor's reads stayed in L2 ({floor:.3f} us flushed, {warm:.3f} us warm, "
            f"{FLOOR_TRIES} tries): floor not trusted"
        )
    if not torch.equal(dst.view(-1, 64)[:, :4], src.view(-1, 64)[:, :4]):
        raise RuntimeError("the floor kernel did not copy: floor not trusted")
    empty_t = time_graph(empty, sets, device, repeats=20)
    return floor, empty_t.median_us


def get_ceilings(device: torch.device, *, remeasure: bool = False, log=print) -> tuple[Ceilings, dict]:
    """The card's ceilings (copy and matmul from the cache when present) and the details behind them."""
    gpu = torch.cuda.get_device_name(device)
    drv = driver_version()
    cached = None if remeasure else load_cached(gpu, drv)
    details: dict = {}
    if cached:
        copy_gbps, mm, measured_at = cached["copy_gbps"], cached["matmul_tflops"], cached["measured_at"]
        mm8 = cached.get("matmul_fp8_tflops", 0.0)
        details = cached.get("details", {})
        source = f"cache: {cache_path()}"
        log(f"ceilings from {cache_path()} (measured {measured_at}; --remeasure-ceilings to redo)")
    else:
        log("measuring ceilings: Triton copy kernel, bf16 and fp8 matmul (once per GPU and driver)")
        copy_gbps, details["copy_configs_gbps"] = measure_copy_gbps(device)
        torch.cuda.empty_cache()
        mm = measure_matmul_tflops(device)
        mm8 = measure_matmul_fp8_tflops(device)
        measured_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        source = "measured"
        store_cached(
            gpu,
            drv,
            {
                "copy_gbps": copy_gbps,
                "matmul_tflops": mm,
                "matmul_fp8_tflops": mm8,
                "measured_at": measured_at,
                "details": details,
            },
        )
    floor, empty = measure_floor_us(device)
    torch.cuda.empty_cache()  # the 2 GiB of copy buffers
    return Ceilings(copy_gbps, mm, floor, empty, gpu, drv, measured_at, source, matmul_fp8_tflops=mm8), details
