"""``tritonkit tune OP --model NAME [--dtype DTYPE] [--num-tokens M ...] [--out DIR] [--progress FILE]
[--budget-s S] [--jobs N]``: measure an op's tile-config table on this card (``TUNABLE`` names the ops)."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import TUNABLE

EPILOG = """\
examples:
  tritonkit tune fused_moe --model deepseek-v3                  every default bucket, table into the package
  tritonkit tune fused_moe --model mixtral-8x7b --num-tokens 1 16 256 --out configs/

Per bucket M: block_m near the mean rows per expert (M * topk / E); GEMM1's tiles beside the default rule's GEMM2,
then GEMM2's beside GEMM1's best. Each config is timed as one whole fused_moe call (alignment included): the median
of CUDA-graph replays, L2 flushed before each, on one random routing, and the fastest few on 3 routings (the mean
decides). Candidates compile first in --jobs worker processes. After each bucket the progress file is rewritten;
rerunning the same command skips the buckets it holds. The table (the tuned buckets of that file) is read by the
op's config lookup for this card, dtype and Triton version."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line naming the argument, not the whole usage
        raise _Usage(message)


class _Usage(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    from .defaults import BUDGET_S, DEFAULT_BUCKETS, MAX_JOBS

    p = _Parser(
        prog="tritonkit tune",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Time an op's tile configs on this GPU and write the table its config lookup reads.",
    )
    p.add_argument("op", metavar="OP", help=f"the op to tune: {', '.join(TUNABLE)}")
    p.add_argument("--model", required=True, metavar="NAME", help="the model whose layer shapes are tuned")
    p.add_argument("--dtype", default="bfloat16", metavar="DTYPE", help="bfloat16 or float16 (default: bfloat16)")
    p.add_argument(
        "--num-tokens",
        nargs="+",
        type=int,
        metavar="M",
        help=f"buckets (default: {' '.join(map(str, DEFAULT_BUCKETS))}: the bench's sweep through "
        f"16384; the lookup takes the nearest bucket in log2)",
    )
    p.add_argument("--out", metavar="DIR", help="where the table goes (default: the op's package configs/ folder)")
    p.add_argument(
        "--progress",
        metavar="FILE",
        help="progress JSON, rewritten after each bucket (default: DIR/.progress/<table name>)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=BUDGET_S,
        metavar="S",
        help=f"search seconds per bucket; past it each remaining phase times only its seed config "
        f"(default: {BUDGET_S:.0f})",
    )
    p.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help=f"compile worker processes; 0 compiles in the timing loop (default: min({MAX_JOBS}, CPUs))",
    )
    return p


def _err(msg: str) -> int:
    print(f"tritonkit tune: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    if argv and argv[0] not in TUNABLE and not argv[0].startswith("-"):
        return _err(f"unknown op {argv[0]!r}; tunable: {', '.join(TUNABLE)}")
    try:
        args = _parser().parse_args(argv)
    except _Usage as e:
        return _err(str(e))
    except SystemExit as e:  # --help
        return int(e.code or 0)
    if args.op not in TUNABLE:
        return _err(f"unknown op {args.op!r}; tunable: {', '.join(TUNABLE)}")
    import torch

    from ..models import MODELS

    mod = importlib.import_module(TUNABLE[args.op])
    having = [m for m, cfg in MODELS.items() if mod.has_layer(cfg)]
    if args.model not in MODELS:
        return _err(f"unknown model {args.model!r}; models with a layer {args.op} tunes: {', '.join(having)}")
    if args.model not in having:
        return _err(f"model {args.model!r} has no layer {args.op} tunes; models that do: {', '.join(having)}")
    names = {str(d).removeprefix("torch."): d for d in mod.DTYPES}
    if args.dtype not in names:
        return _err(f"unknown dtype {args.dtype!r} for --dtype; {args.op} tunes: {', '.join(names)}")
    bad = [m for m in args.num_tokens or () if m < 1]
    if bad:
        return _err(f"--num-tokens must be positive, got {bad[0]}")
    if args.jobs is not None and args.jobs < 0:
        return _err(f"--jobs must be >= 0, got {args.jobs}")
    if not torch.cuda.is_available():
        return _err(
            "no CUDA GPU found (torch.cuda.is_available() is False): a table is measured on the card it is "
            "for; run this on that GPU"
        )
    kw = {"num_tokens": args.num_tokens} if args.num_tokens else {}
    try:
        mod.tune(
            MODELS[args.model],
            names[args.dtype],
            out_dir=args.out,
            progress=args.progress,
            budget_s=args.budget_s,
            jobs=args.jobs,
            **kw,
        )
    except KeyboardInterrupt:
        print(
            "tritonkit tune: interrupted; finished buckets are in the progress file, rerun the same command to resume",
            file=sys.stderr,
        )
        return 130
    except OSError as e:
        return _err(f"cannot write {e.filename or ''}: {e.strerror or e}")
    return 0
