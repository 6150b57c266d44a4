"""``tritonkit bench [OP[:k=v,...] ...] [--models ...] [--dtype ...] [--num-tokens ...] [--shape k=v,...]
[--providers ...] [--out DIR] [--no-startup] [--no-copy-ref] [--compare A.json B.json]``

Beside each point's providers it times a size-matched copy reference (a Triton copy kernel moving the point's bytes,
timed the same way): the "copy us" and "%copy@size" columns and the red dashed curve of the plots. The targets
stay defined against the large-buffer copy ceiling. ``--no-copy-ref`` skips it.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

EPILOG = """\
examples:
  tritonkit bench rms_norm --models llama3-8b                 the num_tokens sweep 1..65536 for one model
  tritonkit bench rms_norm rms_norm:residual=0 silu_and_mul   an OP:k=v,... sets shape keys for that op only
  tritonkit bench rms_norm --shape num_tokens=4096,hidden=5120  one point (keys set on every sweep point)
  tritonkit bench --compare old/bench.json new/bench.json     per-point time ratios, no GPU needed

Timing is CUDA-graph replay over input sets that together exceed the L2 (cold), reported beside plain eager
calls; every provider is checked against the float64 reference first (a wrong one is reported, not timed).
inductor = torch.compile(reference, dynamic=False), compiled per point; inductor-dynamic compiles once.
copy us / %copy@size: a Triton copy kernel reading and writing the point's bytes (N + N), timed the same way, once
per point; %copy@size = copy us / tritonkit us. At mid sizes a copy itself stays well under the ceiling, so this
separates a slow kernel from a point no kernel can bring to the ceiling. The targets do not use it.
"""


def _parser() -> argparse.ArgumentParser:
    from ..models import DEFAULT_BENCH_MODELS, DEFAULT_MOE_BENCH_MODELS

    # the ops' own providers come from their specs (torch, Triton): named by --list, checked in main
    from .provider_names import GENERIC_PROVIDERS, NOT_DEFAULT

    p = argparse.ArgumentParser(
        prog="tritonkit bench",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Decode-to-prefill sweeps of the built-in ops against the card's "
        "measured copy bandwidth and a launch floor.",
    )
    p.add_argument("ops", nargs="*", metavar="OP[:k=v,...]", help="ops to time (default: every built-in op)")
    p.add_argument(
        "--models",
        nargs="+",
        metavar="MODEL",
        help=f"model configs of the sweep; an op sweeps those that have its layer (default: "
        f"{' '.join(DEFAULT_BENCH_MODELS)}; for the expert ops {' '.join(DEFAULT_MOE_BENCH_MODELS)})",
    )
    p.add_argument(
        "--dtype",
        nargs="+",
        default=["bfloat16"],
        dest="dtypes",
        metavar="DTYPE",
        help="float16 bfloat16 float32 (default: bfloat16)",
    )
    p.add_argument("--num-tokens", nargs="+", type=int, metavar="N", help="num_tokens points (default: 1 .. 65536)")
    p.add_argument(
        "--shape",
        default="",
        metavar="k=v,...",
        help="shape keys set on every point of every op; with num_tokens, a single point",
    )
    p.add_argument(
        "--series",
        nargs="+",
        metavar="NAME",
        help="of an op with named series, sweep only these (default: all; --list names them)",
    )
    p.add_argument(
        "--list",
        action=_List,
        nargs=0,
        help="print every provider and each built-in op's named series, then exit (it imports the ops: seconds)",
    )
    p.add_argument(
        "--providers",
        nargs="+",
        metavar="NAME",
        help=f"from {', '.join(GENERIC_PROVIDERS)} and the peers the ops declare (vllm, sdpa, ...: --list names "
        f"them; default: all but {', '.join(NOT_DEFAULT)}; vllm where importable)",
    )
    p.add_argument("--out", default="out/bench", metavar="DIR", help="where bench.json and <op>.png go")
    p.add_argument(
        "--record",
        metavar="DIR",
        help="publish the run: append its rows to DIR/bench.csv (one long table per GPU: date, card, "
        "software, sha, op, series, shape, provider, us, GB/s, TFLOP/s, %% of ceiling) and write "
        "each op's results and plot to DIR/latest/<op>.json and .png",
    )
    p.add_argument(
        "--from",
        dest="from_json",
        metavar="BENCH.json",
        help="with --record: publish a finished run (its JSON, and the PNGs beside it), no GPU needed",
    )
    p.add_argument("--no-startup", action="store_true", help="skip the fresh-process startup measurement")
    p.add_argument("--no-plot", action="store_true", help="write no PNGs")
    p.add_argument(
        "--no-copy-ref",
        action="store_true",
        help="skip the size-matched copy reference (one more CUDA-graph timing per point)",
    )
    p.add_argument("--repeats", type=int, metavar="N", help="replays per measurement (default: adaptive, 5..50)")
    p.add_argument(
        "--deadline",
        type=float,
        metavar="SECONDS",
        help="after this many seconds only tritonkit is timed (keeps a device run inside its lease)",
    )
    p.add_argument(
        "--point-budget",
        type=float,
        metavar="SECONDS",
        default=None,
        help="a provider whose timing at a point would take longer is skipped there, with the reason, "
        "and at the series' larger points (default: 20)",
    )
    p.add_argument("--remeasure-ceilings", action="store_true", help="ignore the cached ceilings for this GPU")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"), help="print per-point ratios B/A and exit")
    p.add_argument(
        "--base",
        metavar="REV",
        help="also time the ops of git revision REV (imported beside this tree, in this process) at the "
        "same points: a base@<sha> column and its time over tritonkit's per point",
    )
    p.add_argument(
        "--base-retime",
        action="store_true",
        help="time REV's points again even where an earlier run on this GPU cached them",
    )
    return p


class _List(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        from .providers import ALL_PROVIDERS, DEFAULT_PROVIDERS

        print(f"providers: {', '.join(ALL_PROVIDERS)} (default: {' '.join(DEFAULT_PROVIDERS)})")
        print(f"series:\n{_series_help()}")
        parser.exit()


def _series_help() -> str:
    """Each built-in op's named series, one op a line, as its spec declares them on the first default model that
    has its layer."""
    from ..models import DEFAULT_BENCH_MODELS, DEFAULT_MOE_BENCH_MODELS, MODELS
    from ..ops import specs
    from .runner import series_names

    parts = []
    for spec in specs().values():
        models = [m for m in (*DEFAULT_BENCH_MODELS, *DEFAULT_MOE_BENCH_MODELS, *MODELS) if spec.has_layer(MODELS[m])]
        names = series_names(spec, models[0]) if models else []
        if names:
            parts.append(f"{spec.name}: {', '.join(map(repr, names))}")
    return "\n".join(parts)


def _err(msg: str) -> int:
    print(f"tritonkit bench: {msg}", file=sys.stderr)
    return 2


def _base_meta(repeats: int | None) -> dict:
    """What a cached base timing must share with this run to be reused: the card, driver and software, and how
    points are timed (``repeats``, and the runner's cap on input sets)."""
    import torch
    import triton

    from .._env import driver_version
    from .runner import MAX_SETS

    return {
        "gpu": torch.cuda.get_device_name(),
        "driver": driver_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "repeats": repeats,
        "max_sets": MAX_SETS,
    }


class _Refused(Exception):
    """An argument the run cannot start with: its message is the error line (exit 2)."""


def _record_finished(directory: str | None, path: str) -> int:
    from .records import TABLE_COLUMNS, read_json, record

    if not directory:
        return _err("--from needs --record DIR: where to publish the run")
    try:
        results = read_json(path)
    except (OSError, ValueError) as e:
        return _err(f"--from {path}: {e}")
    folder = pathlib.Path(path).parent
    plots = {op: folder / f"{op}.png" for op in {p.op for p in results.points}}
    try:
        print(record(directory, results, plots))
    except ValueError as e:
        return _err(f"--record {directory}: {e} (columns: {', '.join(TABLE_COLUMNS)})")
    except OSError as e:
        return _err(f"--record {directory}: cannot write there ({e.strerror or e})")
    return 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.compare:
        from .compare import main_compare

        return main_compare(*args.compare)
    if args.from_json:
        return _record_finished(args.record, args.from_json)
    # the arguments first: a typo is named as one on any machine, not hidden behind "no GPU"
    try:
        cfg = _config(args)
    except _Refused as e:
        return _err(str(e))

    import torch

    if not torch.cuda.is_available():
        return _err(
            "no CUDA GPU found (torch.cuda.is_available() is False). Bench times kernels on a GPU "
            "(CUDA graphs, events); on a CPU only --compare A.json B.json works. "
            "Run it on a machine with a CUDA GPU; `tritonkit validate` checks correctness on a CPU."
        )
    try:
        cfg, base_cache = _with_base(cfg, args)
        _check_record_dir(args.record)
    except _Refused as e:
        return _err(str(e))
    return _run(cfg, base_cache, args, argv)


def _config(args):
    """The run's BenchConfig, built once from the arguments, each bad one refused with a _Refused naming it; no GPU
    needed and nothing written (the --base tree is checked out by :func:`_with_base`)."""
    import torch

    from ..models import DEFAULT_BENCH_MODELS, NUM_TOKENS_SWEEP
    from .providers import DEFAULT_PROVIDERS
    from .runner import POINT_BUDGET_S, BenchConfig

    models_given = args.models is not None
    models = list(args.models) if models_given else list(DEFAULT_BENCH_MODELS)
    targets = _targets(args, models, models_given)
    dtypes = _dtypes(args.dtypes, targets)
    small = [n for n in args.num_tokens or () if n < 1]
    if small:
        raise _Refused(f"--num-tokens: a number of tokens is at least 1, got {small[0]}")
    if args.repeats is not None and args.repeats < 1:
        raise _Refused(f"--repeats must be at least 1 replay per measurement, got {args.repeats}")
    for flag, v in (("--deadline", args.deadline), ("--point-budget", args.point_budget)):
        if v is not None and not v > 0:
            raise _Refused(f"{flag} must be a positive number of seconds, got {v}")
    if args.base_retime and not args.base:
        raise _Refused("--base-retime applies only with --base REV")
    out = pathlib.Path(args.out)
    if out.exists() and not out.is_dir():
        raise _Refused(f"--out {args.out}: it is not a folder (bench.json and the plots go in one)")
    _check_record_dir(args.record, create=False)
    return BenchConfig(
        targets=targets,
        models=models,
        models_given=models_given,
        dtypes=dtypes,
        num_tokens=list(args.num_tokens or NUM_TOKENS_SWEEP),
        providers=list(args.providers or DEFAULT_PROVIDERS),
        startup=not args.no_startup,
        repeats=args.repeats,
        deadline_s=args.deadline,
        point_budget_s=args.point_budget if args.point_budget is not None else POINT_BUDGET_S,
        copy_ref=not args.no_copy_ref,
        device=torch.device("cuda"),
        series=tuple(args.series) if args.series else None,
    )


def _with_base(cfg, args):
    """``cfg`` with the --base tree checked out and imported, and its cached timings on this GPU; and where those are
    cached (None without --base)."""
    if not args.base:
        return cfg, None
    import dataclasses

    import torch

    from .base import BaseTreeError, checkout, load_points

    try:
        base = checkout(args.base)
        base.import_package()
    except BaseTreeError as e:
        raise _Refused(str(e)) from None
    base_cache = base.cache_dir(torch.cuda.get_device_name()) / "points.json"
    cached = {} if args.base_retime else load_points(base_cache, _base_meta(args.repeats))
    return dataclasses.replace(cfg, base=base, base_cached=cached), base_cache


def _targets(args, models: list[str], models_given: bool) -> list:
    """The ops to time with their shape overrides, each one's sweep probed (an unknown series or a model without
    the op's layer is refused here, before any timing)."""
    from ..models import MODELS
    from ..ops import OP_NAMES, get_spec
    from .providers import ALL_PROVIDERS
    from .runner import BenchConfig, OpTarget, parse_kv, series_names, sweep_points

    unknown = [p for p in args.providers or () if p not in ALL_PROVIDERS]
    if unknown:
        raise _Refused(f"--providers: unknown provider {unknown[0]!r}; known: {', '.join(ALL_PROVIDERS)}")
    try:
        shape_kv = parse_kv(args.shape)
        targets = [OpTarget.parse(t) for t in (args.ops or OP_NAMES)]
    except ValueError as e:
        raise _Refused(str(e)) from None
    if shape_kv:
        targets = [OpTarget(t.name, tuple({**shape_kv, **dict(t.overrides)}.items())) for t in targets]
    for m in models:
        if m not in MODELS:
            raise _Refused(f"--models: unknown model {m!r}; known: {', '.join(MODELS)}")
    unknown = [t.name for t in targets if t.name not in OP_NAMES]
    if unknown:
        raise _Refused(f"unknown op {unknown[0]!r}; built-in ops: {', '.join(OP_NAMES)}")
    with_series = []
    for t in targets:
        try:
            spec = get_spec(t.name)
        except Exception:  # noqa: BLE001 - an op still being written: the runner reports it
            continue
        try:
            probe = BenchConfig(targets=[t], models=models, models_given=models_given)
            first = probe.models_for(spec)[:1]
            sweep_points(spec, first, [1], dict(t.overrides), args.series)
        except ValueError as e:
            raise _Refused(str(e)) from None
        if series_names(spec, first[0]):
            with_series.append(t.name)
    if args.series and not with_series:
        raise _Refused(
            f"--series: {', '.join(t.name for t in targets)} {'has' if len(targets) == 1 else 'have'} no named "
            "series (`tritonkit bench --list` names the ops' series)"
        )
    return targets


def _dtypes(names: list[str], targets) -> list:
    """The torch dtypes named; one that is no torch dtype, or that none of the ``targets`` supports, refused."""
    import torch

    from ..ops import get_spec
    from ..spec import dtype_name

    dtypes = []
    for d in names:
        dt = getattr(torch, d, None)
        if not isinstance(dt, torch.dtype):
            raise _Refused(f"--dtype: unknown dtype {d!r} (torch names: float16, bfloat16, float32)")
        dtypes.append(dt)
    supported = {}
    for t in targets:
        try:
            supported[t.name] = get_spec(t.name).dtypes
        except Exception:  # noqa: BLE001 - an op still being written: the runner reports it
            return dtypes
    for name, dt in zip(names, dtypes):
        if not any(dt in ds for ds in supported.values()):
            ops = "; ".join(f"{op}: {', '.join(map(dtype_name, ds))}" for op, ds in supported.items())
            raise _Refused(f"--dtype: no op here supports {name} ({ops})")
    return dtypes


def _check_record_dir(record: str | None, create: bool = True) -> None:
    """--record DIR must be writable (made when ``create``) and, where it holds a bench table, one with the bench's
    columns."""
    if not record:
        return
    from .records import TABLE_COLUMNS

    table = pathlib.Path(record) / "bench.csv"
    if pathlib.Path(record).exists() and not pathlib.Path(record).is_dir():
        raise _Refused(f"--record {record}: it is not a folder")
    try:
        if create:
            table.parent.mkdir(parents=True, exist_ok=True)
        if table.exists():
            with table.open() as f:
                head = f.readline().strip().split(",")
            if tuple(head) != TABLE_COLUMNS:
                raise _Refused(f"--record {record}: {table} has other columns than a bench table")
    except OSError as e:
        raise _Refused(f"--record {record}: cannot write there ({e.strerror or e})") from None


def _run(cfg, base_cache, args, argv: list[str]) -> int:
    """Time the run, write bench.json (as it goes), the plots and the record; print the tables. 1 when a tritonkit
    point came out wrong or an op failed."""
    from . import report
    from .ceilings import get_ceilings
    from .records import Results, record, write_json
    from .runner import run

    out = pathlib.Path(args.out)
    meta = report.metadata(argv, cfg.device)
    if cfg.copy_ref:
        from .ceilings import SIZED_COPY_BLOCK, SIZED_COPY_WARPS

        meta["copy_ref"] = (
            f"per point: Triton copy kernel (BLOCK={SIZED_COPY_BLOCK} int32, num_warps="
            f"{SIZED_COPY_WARPS}) reading and writing bytes/2 each in whole 16-byte vectors, own "
            "rotation sets or L2 flush by the same rule, CUDA-graph timing"
        )
    t0 = time.perf_counter()
    with report.BarProgress() as progress:
        ceil, details = get_ceilings(cfg.device, remeasure=args.remeasure_ceilings, log=progress.log)
        ceil_dict = {**ceil.to_dict(), "details": details}
        progress.log(report.ceilings_text(ceil_dict))

        def partial(ops, points):
            write_json(out / "bench.json", Results(meta, ceil_dict, ops, points))

        ops, points = run(cfg, ceil, progress, on_target_done=partial)
    meta["elapsed_s"] = time.perf_counter() - t0
    results = Results(meta, ceil_dict, ops, points)
    path = write_json(out / "bench.json", results)
    if cfg.base is not None:
        from .base import load_points, save_points

        timed = [
            dict(p.to_dict(), timed_at=meta["date"])
            for p in points
            if p.provider == cfg.base.label and p.ok and not p.detail.startswith("reused")
        ]
        kept = load_points(base_cache, _base_meta(cfg.repeats))
        save_points(base_cache, [*kept.values(), *timed], _base_meta(cfg.repeats))
    pngs = []
    if not args.no_plot:
        from .plot import write_plots

        pngs = write_plots(results, out)
    pngs_note = record(args.record, results, {p.stem: p for p in pngs}) if args.record else ""
    print(report.format_results(results))
    print(
        f"\nwrote {path}"
        + (f" and {', '.join(str(p) for p in pngs)}" if pngs else "")
        + f" in {meta['elapsed_s']:.0f} s"
        + (f"; {pngs_note}" if pngs_note else "")
        + "\n"
    )
    print(report.format_summary(results))
    bad = any(p.status in ("wrong", "error") and p.provider == "tritonkit" for p in points)
    failed_ops = any(o.error for o in ops)
    return 1 if bad or failed_ops else 0
