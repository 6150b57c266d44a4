"""Call one op at one bench point a few times, eagerly: a driver for Nsight Compute. From the repository root on a
GPU machine, e.g. the paged-attention decode kernel at a batch of 4 over 4K keys, or the prefill kernel at 8K
(an op may carry the bench's shape overrides: ``paged_attention:num_seqs=8``):

    PYTHONPATH=src ncu --kernel-name regex:decode_kernel --launch-skip 4 --launch-count 1 \\
        python3 benchmarks/gpu/profile_op.py paged_attention 4 --series "decode 4K keys"
    PYTHONPATH=src ncu --kernel-name regex:prefill_kernel --launch-skip 2 --launch-count 1 \\
        python3 benchmarks/gpu/profile_op.py paged_attention 8192 --series "prefill causal"

The point is the one ``tritonkit bench OP --num-tokens N`` times (the op's sweep series, Llama-3-8B dims unless
--model says otherwise), on the inputs the bench makes. What the two above showed: docs/notes/decode-tiling.md
and docs/notes/prefill-tiles.md.
"""

from __future__ import annotations

import argparse
import sys

import torch

from tritonkit.bench.runner import OpTarget, sweep_points
from tritonkit.models import MODELS
from tritonkit.ops import get_spec
from tritonkit.testing import Fill


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("op")
    p.add_argument("num_tokens", type=int)
    p.add_argument("--series", default=None, help="the sweep series (ops with several; default: the first)")
    p.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--calls", type=int, default=8)
    args = p.parse_args(argv)
    target = OpTarget.parse(args.op)
    spec = get_spec(target.name)
    # the bench's own points: its series names and shape keys checked, the overrides applied as it applies them
    try:
        points = sweep_points(
            spec, [args.model], [args.num_tokens], dict(target.overrides), [args.series] if args.series else None
        )
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if not points:
        print(f"{args.op} has no sweep point at num_tokens={args.num_tokens}", file=sys.stderr)
        return 2
    shape, name = points[0].shape, points[0].config.split(" | ")[0]
    inputs = spec.make_inputs(shape, getattr(torch, args.dtype), Fill("randn", "cuda", 0))
    for _ in range(args.calls):
        spec.call(inputs)
    torch.cuda.synchronize()
    print(f"{args.op} [{name}] {shape.id}: {args.calls} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
