"""``tritonkit tune fused_moe``: the tile-config table of one model's expert layer, measured on this card.

Per bucket M (num_tokens): for each block_m near the mean rows per expert, GEMM1's tiles are timed beside the default
rule's GEMM2, then GEMM2's beside GEMM1's best; the best whole config of any block_m wins (the candidates and their
pruning: :mod:`.space`). A winner of SLOT_BLOCK_M rows is then timed in the other layout too (blocks of one slot
against the sorted layout, ``FusedMoeConfig.slots``), and the faster one is kept. A timing is one whole
``forward(..., config=cfg)`` call (alignment, quantization, both GEMMs, the topk sum): the median of the bench's
CUDA-graph replays (``bench.timing.time_graph``), L2 flushed before each replay. Every candidate is first timed on
one random routing (the screen); the SHORTLIST fastest are timed on ROUTINGS routings in all and the lowest mean
wins. Before the timing loop, worker processes compile every candidate
(Triton's on-disk cache then holds them); a config that fails to compile, raises, or disagrees with the default
rule's output is dropped with a note.

After each bucket the progress file gets the finished buckets (and the partial table); a rerun with the same table
key skips them. The table (``ops/fused_moe/config.py``'s format) holds every finished bucket of that file.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import math
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from ..models import ModelConfig
from ..ops.fused_moe import config as _config
from ..ops.fused_moe.api import check_args, forward, reload_tables
from ..ops.fused_moe.config import FusedMoeConfig, GemmConfig
from ..ops.fused_moe.spec import make_inputs
from ..spec import dtype_name
from ..testing.inputs import Fill
from .defaults import BUDGET_S, DEFAULT_BUCKETS, MAX_JOBS
from .space import GEMM1, GEMM2, SPACE, Layer, Space, block_ms, compile_units, phase_candidates, seed

DTYPES = (torch.bfloat16, torch.float16)
#: routings (seeds) each shortlisted config is timed on: routing moves rows between experts, and with them padding
ROUTINGS = 3
#: screened configs timed on every routing: the screen's order among near-equal tiles is noise
SHORTLIST = 4
#: block_m of the winners also timed in the other layout: blocks of one slot fill only a tile's first row, so only the
#: tensor core's smallest M tile takes them
SLOT_BLOCK_M = 16
#: tokens of a compile worker's call: any count compiles the same GEMM kernels (per-call integers are unspecialized)
COMPILE_TOKENS = 16
#: largest |candidate - default| over max |default| accepted: sum-order and rounding-point differences stay near one
#: bf16 ulp (2^-8) of the largest output; a missed tile or a wrong expert is off by O(max)
CHECK_RTOL = 2.0**-5
#: routing seeds are ROUTING_SEED + routing; the weights' are their first expert's index
ROUTING_SEED = 1000
#: experts per make_inputs call: its float32 temporaries of all 256 DeepSeek-V3 experts would take ~200 GB; 4, ~3 GB
WEIGHT_CHUNK = 4
#: where a run's progress goes by default: a folder under --out, which the table lookup (``*.json``) never reads
PROGRESS_DIR = ".progress"

Timer = Callable[[FusedMoeConfig, int, int], float]
"""``timer(cfg, M, routing) -> seconds`` of one call at bucket M on routing number ``routing`` (0, 1, ...)."""


def has_layer(model: ModelConfig) -> bool:
    return model.is_moe


def describe(cfg: FusedMoeConfig) -> str:
    def one(g: GemmConfig) -> str:
        return f"n{g.block_n} k{g.block_k} g{g.group_m} w{g.num_warps} s{g.num_stages}"

    slots = ", slot blocks" if cfg.slots else ""
    return f"block_m {cfg.block_size}{slots}, gemm1 {one(cfg.gemm1)}, gemm2 {one(cfg.gemm2)}"


@dataclasses.dataclass
class BucketResult:
    config: FusedMoeConfig
    seconds: float  # mean over ROUTINGS routings, per call
    tried: int  # distinct configs timed or dropped
    notes: list[str]


class _Bucket:
    """One bucket's timings, by config and routing, and the configs dropped (with why)."""

    def __init__(self, M: int, timer: Timer, routings: int, clock: Callable[[], float]):
        self.M, self.timer, self.routings, self.clock = M, timer, routings, clock
        self.times: dict[FusedMoeConfig, list[float]] = {}
        self.dropped: dict[FusedMoeConfig, str] = {}

    def time(self, cfg: FusedMoeConfig, routings: int) -> float | None:
        """Mean seconds over the first ``routings`` routings (timing those not yet timed); None once dropped."""
        if cfg in self.dropped:
            return None
        ts = self.times.setdefault(cfg, [])
        while len(ts) < routings:
            try:
                ts.append(float(self.timer(cfg, self.M, len(ts))))
            except Exception as e:  # noqa: BLE001 - out of resources, a wrong result: the config is dropped, the run goes on
                del self.times[cfg]
                self.dropped[cfg] = f"M={self.M} {describe(cfg)}: {type(e).__name__}: {str(e)[:200]}"
                return None
        return statistics.fmean(ts[:routings])

    def best_of(self, cfgs: list[FusedMoeConfig], deadline: float) -> FusedMoeConfig | None:
        """Screen ``cfgs`` on routing 0 in order until the deadline (the first always), then the SHORTLIST fastest
        on every routing: the lowest mean."""
        screened = []
        for i, cfg in enumerate(cfgs):
            if i and self.clock() > deadline:
                break
            t = self.time(cfg, 1)
            if t is not None:
                screened.append((t, i))
        short = [cfgs[i] for _, i in sorted(screened)[:SHORTLIST]]
        means = [(m, i) for i, c in enumerate(short) if (m := self.time(c, self.routings)) is not None]
        return short[min(means)[1]] if means else None


def search_bucket(
    M: int,
    layer: Layer,
    elem_bytes: int,
    timer: Timer,
    *,
    space: Space = SPACE,
    routings: int = ROUTINGS,
    budget_s: float = BUDGET_S,
    banned: dict | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> BucketResult:
    """The best config at bucket M (module docstring). ``banned``: {(gemm, GemmConfig): why} that did not compile."""
    banned = banned or {}
    default = layer.default(M)
    bms = block_ms(M, layer, space)
    b = _Bucket(M, timer, routings, clock)
    start, phases = clock(), 2 * len(bms)
    best: FusedMoeConfig | None = None
    for i, bm in enumerate(bms):
        s = seed(default, bm)
        c1 = phase_candidates(GEMM1, M, bm, layer, elem_bytes, space, s.gemm1, banned)
        # the seed's layout (slot blocks or sorted) holds for every tile of its block_m
        won1 = b.best_of([FusedMoeConfig(g, s.gemm2, s.slots) for g in c1], start + budget_s * (2 * i + 1) / phases)
        if won1 is None:
            continue
        c2 = phase_candidates(GEMM2, M, bm, layer, elem_bytes, space, s.gemm2, banned)
        won2 = b.best_of([FusedMoeConfig(won1.gemm1, g, s.slots) for g in c2], start + budget_s * (2 * i + 2) / phases)
        won = won2 or won1
        if best is None or b.time(won, routings) < b.time(best, routings):
            best = won
    if best is None:
        raise RuntimeError(f"fused_moe M={M}: every config failed; first: {next(iter(b.dropped.values()), '?')}")
    if best.block_size == SLOT_BLOCK_M:
        # the same tiles in the other layout: which one pays depends on how many slots share an expert
        other = dataclasses.replace(best, slots=1 - best.slots)
        t = b.time(other, routings)
        if t is not None and t < b.time(best, routings):
            best = other
    return BucketResult(best, b.time(best, routings), len(b.times) + len(b.dropped), list(b.dropped.values()))


def compile_experts(E: int) -> int:
    """Experts a compile worker's weights hold: Triton specializes the expert count only on == 1 and % 16, so 16
    stands for any multiple of 16 (DeepSeek-V3's 256 experts of fp8 weights are 11 GB; 16 are 0.7 GB)."""
    return 16 if E % 16 == 0 else E


def _record(inputs: dict, out: torch.Tensor | None = None):
    """fused_moe's checked argument record of a layer's inputs (api.check_args)."""
    return check_args(
        inputs["hidden_states"],
        inputs["w1"],
        inputs["w2"],
        inputs["topk_weights"],
        inputs["topk_ids"],
        w1_scale=inputs.get("w1_scale"),
        w2_scale=inputs.get("w2_scale"),
        block_shape=inputs.get("block_shape"),
        out=out,
    )


def _call(inputs: dict, cfg: FusedMoeConfig, out: torch.Tensor | None = None) -> torch.Tensor:
    return forward(_record(inputs, out), config=cfg)


def layer_weights(layer: Layer, dtype: torch.dtype, device: torch.device, experts: int | None = None) -> dict:
    """w1 [E, 2N, K] and w2 [E, K, N] as the spec makes them (quantized as the layer ships: w1_scale, w2_scale,
    block_shape), of ``experts`` (default E) experts, WEIGHT_CHUNK experts per ``make_inputs`` call."""
    experts = experts or layer.E
    out: dict = {}
    for i in range(0, experts, WEIGHT_CHUNK):
        n = min(WEIGHT_CHUNK, experts - i)
        got = make_inputs(layer.shape(1, experts=n, topk=min(layer.topk, n)), dtype, Fill("randn", device, i))
        for k in ("w1", "w2", "w1_scale", "w2_scale"):
            if k in got:
                if k not in out:
                    out[k] = torch.empty((experts, *got[k].shape[1:]), dtype=got[k].dtype, device=device)
                out[k][i : i + n].copy_(got[k])
        if "block_shape" in got:
            out["block_shape"] = got["block_shape"]
    return out


def routing(
    layer: Layer, M: int, dtype: torch.dtype, device: torch.device, seed: int, experts: int | None = None
) -> dict:
    """The spec's x [M, K] and random softmax top-k routing over ``experts`` (default E) experts (its weights, of
    one intermediate column and unquantized, are not kept)."""
    shape = layer.shape(M, experts=experts or layer.E, inter=1, quant="none")
    got = make_inputs(shape, dtype, Fill("randn", device, seed))
    return {k: got[k] for k in ("hidden_states", "topk_weights", "topk_ids")}


def compile_inputs(layer: Layer, dtype: torch.dtype, device: torch.device) -> dict:
    """A compile worker's inputs: COMPILE_TOKENS tokens, the layer's N, K, topk and quant, compile_experts(E)."""
    e = compile_experts(layer.E)
    return routing(layer, COMPILE_TOKENS, dtype, device, ROUTING_SEED, e) | layer_weights(layer, dtype, device, e)


_WORKER: dict = {}


def _init_worker(layer: Layer, dtype: str, device: str) -> None:
    torch.set_num_threads(1)
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    _WORKER.update(inputs=compile_inputs(layer, getattr(torch, dtype), dev), device=dev)


def _compile_one(cfg: dict) -> str | None:
    """Run one config once in a worker (compiling its kernels into the on-disk cache); the error, or None."""
    try:
        _call(_WORKER["inputs"], FusedMoeConfig.from_dict(cfg))
        if _WORKER["device"].type == "cuda":
            torch.cuda.synchronize(_WORKER["device"])
    except Exception as e:  # noqa: BLE001 - out of resources, a compiler error: reported, the worker goes on
        return f"{type(e).__name__}: {str(e)[:200]}"
    return None


def precompile(
    units: dict, layer: Layer, dtype: torch.dtype, device: torch.device, jobs: int, log: Callable[[str], None] = print
) -> dict:
    """Run every unit once in ``jobs`` spawned worker processes. Returns {(gemm, GemmConfig): error} of the units
    that failed; if the pool breaks (a worker crashed), the units not done are left to the timing loop."""
    failed: dict = {}
    t0 = time.monotonic()
    ctx = multiprocessing.get_context("spawn")  # a forked CUDA context is unusable
    pool = cf.ProcessPoolExecutor(
        jobs, mp_context=ctx, initializer=_init_worker, initargs=(layer, dtype_name(dtype), str(device))
    )
    futures = {pool.submit(_compile_one, cfg.as_dict()): key for key, cfg in units.items()}
    try:
        for fut in cf.as_completed(futures):
            if (err := fut.result()) is not None:
                failed[futures[fut][:2]] = err  # (gemm, tile): a tile that does not compile is dropped either way
    except cf.process.BrokenProcessPool as e:
        log(f"compile workers stopped ({e}); the rest compile as they are timed")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # an interrupt does not wait for the queued compiles
    note = f"; {len(failed)} dropped, first: {next(iter(failed.values()))}" if failed else ""
    log(f"compiled {len(units)} GEMM tiles in {time.monotonic() - t0:.1f} s on {jobs} workers{note}")
    return failed


class WrongResult(RuntimeError):
    """A candidate's output disagrees with the default rule's on the same inputs."""


def disagreement(out: torch.Tensor, ref: torch.Tensor) -> str | None:
    """Why ``out`` is not ``ref`` up to CHECK_RTOL of ref's largest magnitude (non-finite values fail), or None."""
    out, ref = out.float(), ref.float()
    if not torch.isfinite(out).all():
        return f"{int((~torch.isfinite(out)).sum())} non-finite outputs"
    err, scale = (out - ref).abs().max().item(), ref.abs().max().item()
    if err > CHECK_RTOL * scale:
        return f"max |out - default| {err:.3g} over {CHECK_RTOL:.3g} x max |default| {scale:.3g}"
    return None


class GraphTimer:
    """The tuner's timer on a CUDA device: one ``forward(..., config=cfg)`` call per CUDA graph, its median replay
    (``time_graph``) with the L2 flushed before each replay, in seconds.

    The weights ([E, 2N, K] and [E, K, N], quantized as the model ships) are made once and shared by every bucket
    and routing; a routing is the spec's x [M, K] and random softmax top-k of seed ROUTING_SEED + routing. Shared
    weights would stay in L2 across a rotation of input sets, hence the flush (the bench's rule for points whose
    sets are too few to turn the L2 over). A config is checked against the default rule's output before its first
    timing at each bucket (``disagreement``)."""

    def __init__(self, model: ModelConfig, dtype: torch.dtype, device: torch.device):
        self.layer, self.dtype, self.device = Layer.of(model), dtype, torch.device(device)
        self.weights = layer_weights(self.layer, dtype, self.device)
        w = routing(self.layer, 1, dtype, self.device, ROUTING_SEED) | self.weights
        self.quant = _record(w).quant
        self.flush = None
        if self.device.type == "cuda":
            from ..bench.timing import L2Flush

            self.flush = L2Flush(self.device)
        self._M, self._sets, self._ref, self._checked = None, {}, None, set()

    def inputs(self, M: int, r: int) -> dict:
        if M != self._M:  # one bucket's sets at a time
            self._M, self._sets, self._ref, self._checked = M, {}, None, set()
        if r not in self._sets:
            self._sets[r] = routing(self.layer, M, self.dtype, self.device, ROUTING_SEED + r) | self.weights
        return self._sets[r]

    def run(self, cfg: FusedMoeConfig, M: int, r: int = 0) -> torch.Tensor:
        inp = self.inputs(M, r)
        out = torch.full_like(inp["hidden_states"], math.nan)  # an unwritten element fails the check
        return _call(inp, cfg, out)

    def check(self, cfg: FusedMoeConfig, M: int) -> None:
        """WrongResult unless ``cfg`` agrees with the default rule's config on routing 0 of bucket M."""
        self.inputs(M, 0)
        if self._ref is None:
            self._ref = self.run(self.layer.default(M), M)
        why = disagreement(self.run(cfg, M), self._ref)
        if why:
            raise WrongResult(why)

    def __call__(self, cfg: FusedMoeConfig, M: int, r: int) -> float:
        from ..bench.timing import time_graph

        self.inputs(M, r)
        if cfg not in self._checked:
            self.check(cfg, M)
            self._checked.add(cfg)
        t = time_graph(lambda inp: _call(inp, cfg), [self.inputs(M, r)], self.device, before_replay=self.flush)
        return t.median_us * 1e-6


def table_key(layer: Layer, dtype: torch.dtype, device_name: str, triton_version: str) -> dict:
    return {
        "E": layer.E,
        "N": layer.N,
        "K": layer.K,
        "dtype": dtype_name(dtype),
        "quant": layer.quant,
        "device": device_name,
        "triton": triton_version,
    }


def table(key: dict, finished: dict) -> dict:
    """The table file's content (config.py's format) of the finished buckets {M: {"config": ..., ...}}."""
    buckets = sorted(finished)
    return {
        "op": "fused_moe",
        "format": _config.TABLE_FORMAT,
        "key": key,
        "buckets": buckets,
        "configs": {str(m): finished[m]["config"] for m in buckets},
    }


def format_table(d: dict) -> str:
    """A table's JSON laid out as config.py's docstring shows it: one line per bucket (diffs read per bucket)."""
    configs = ",\n".join(f"    {json.dumps(m)}: {json.dumps(c)}" for m, c in d["configs"].items())
    head = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in d.items() if k != "configs")
    return f'{{\n{head},\n  "configs": {{\n{configs}\n  }}\n}}\n'


def write_text(path: Path, text: str) -> None:
    """Write ``path`` atomically: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # not *.json: the table lookup never reads it
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def load_progress(path: Path, key: dict, log: Callable[[str], None] = print) -> dict:
    """{M: finished bucket} of a progress file with this key; {} when there is none (or it is another key's)."""
    if not path.exists():
        return {}
    with open(path) as fh:
        d = json.load(fh)
    if d.get("key") != key:
        log(f"{path} holds another table's progress ({d.get('key')}); starting over")
        return {}
    return {int(m): v for m, v in d["finished"].items()}


def tune(
    model: ModelConfig,
    dtype: torch.dtype = torch.bfloat16,
    *,
    num_tokens: Iterable[int] = DEFAULT_BUCKETS,
    out_dir: str | Path | None = None,
    progress: str | Path | None = None,
    budget_s: float = BUDGET_S,
    jobs: int | None = None,
    device: str | torch.device = "cuda",
    device_name: str | None = None,
    timer: Timer | None = None,
    space: Space = SPACE,
    routings: int = ROUTINGS,
    log: Callable[[str], None] = lambda s: print(s, flush=True),
) -> Path:
    """Tune ``model``'s expert layer at ``num_tokens`` buckets; write and return the table's path.

    ``out_dir``: where the table goes (default: the package's CONFIG_DIR); ``progress``: the progress file (default
    ``out_dir/.progress/<table name>``); ``jobs``: compile workers (0: none, kernels compile as they are timed;
    default min(MAX_JOBS, CPUs)); ``timer``: :data:`Timer` (default :class:`GraphTimer`, which needs CUDA);
    ``device_name``: the table key's device (default ``torch.cuda.get_device_name``)."""
    import triton

    t0 = time.monotonic()
    layer, device = Layer.of(model), torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())  # the workers compile for this one
    if device_name is None:
        device_name = torch.cuda.get_device_name(device)
    key = table_key(layer, dtype, device_name, triton.__version__)
    name = _config.fused_moe_table_name(
        layer.E, layer.N, layer.K, key["dtype"], layer.quant, device_name, key["triton"]
    )
    out_dir = Path(out_dir or _config.CONFIG_DIR)
    progress = Path(progress) if progress else out_dir / PROGRESS_DIR / name
    log(
        f"fused_moe {model.name} {key['dtype']}: E={layer.E} N={layer.N} K={layer.K} topk={layer.topk} "
        f"quant={layer.quant} on {device_name}; progress: {progress}"
    )
    finished = load_progress(progress, key, log)
    todo = [m for m in sorted(set(num_tokens)) if m not in finished]
    if finished:
        log(f"resuming: buckets {sorted(finished)} are done")
    eb = layer.elem_bytes(dtype)
    jobs = min(MAX_JOBS, os.cpu_count() or 1) if jobs is None else jobs
    banned = precompile(compile_units(todo, layer, eb, space), layer, dtype, device, jobs, log) if todo and jobs else {}
    if todo and timer is None:
        timer = GraphTimer(model, dtype, device)
    for m in todo:
        t = time.monotonic()
        r = search_bucket(m, layer, eb, timer, space=space, routings=routings, budget_s=budget_s, banned=banned)
        finished[m] = {
            "config": r.config.as_dict(),
            "us": round(r.seconds * 1e6, 3),
            "tried": r.tried,
            "elapsed_s": round(time.monotonic() - t, 1),
            "notes": r.notes,
        }
        state = {
            "op": "fused_moe",
            "key": key,
            "finished": {str(k): v for k, v in sorted(finished.items())},
            "table": table(key, finished),
        }
        write_text(progress, json.dumps(state, indent=1) + "\n")
        dropped = f", {len(r.notes)} dropped" if r.notes else ""
        log(
            f"M={m:>6}: {r.tried:4d} configs{dropped}, best {r.seconds * 1e6:9.2f} us ({describe(r.config)}), "
            f"{time.monotonic() - t:.1f} s"
        )
    if not finished:
        raise ValueError("fused_moe tune: no buckets to tune (num_tokens is empty)")
    path = out_dir / name
    write_text(path, format_table(table(key, finished)))
    # lookups in this process read the new table
    reload_tables()
    log(f"wrote {path}")
    log(f"total {time.monotonic() - t0:.1f} s")
    return path
