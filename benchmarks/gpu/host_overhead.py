"""Host time per eager op call, with the cached launcher (``tritonkit.ops._launch``) on and off.

CUDA only. Run from the repository root on the GPU machine:

    PYTHONPATH=src python benchmarks/gpu/host_overhead.py [--inductor] [--dtype bfloat16] [--calls 1000]
        [--only LABEL ...] [--json FILE]

For each op, one decode-sized input (Llama-3-8B dims, one token; paged_attention over 256 keys so the kernel
stays shorter than the host's work) timed as ``calls`` back-to-back calls, median of 3 repeats, one sync at the
end (``tritonkit.bench.timing.host_overhead``). Before timing, one call per path on copies of the same inputs:
outputs must match bit for bit, and the fast call must not have gone through ``JITFunction.run``.
``--inductor`` adds ``torch.compile(reference)`` (static shapes) timed the same way, for comparison.
``--torch-baseline`` also times, round by round interleaved with the fast path (``interleaved_host_overhead``), one
torch-only call whose host work no Triton release changes (SDPA over a decode-sized query): the ratio of the two is
what to compare across Triton releases, since a slow spell of the host lands on both (the same 3.6 case read 38.1
and 61.5 us in two runs of one call on the H200 machine).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import triton
import triton.runtime.jit as triton_jit

from tritonkit.bench.providers import Provider, clone_inputs, make_provider
from tritonkit.bench.timing import host_overhead, interleaved_host_overhead
from tritonkit.models import MODELS
from tritonkit.ops import _launch, get_spec
from tritonkit.testing import Fill

MODEL = MODELS["llama3-8b"]


def cases():
    """``(label, op name, shape)``: one token of each op, then the serving points whose host time issue 35 compares
    across Triton releases (paged attention's decode, short prompt and draft tokens; fused_moe at one token)."""
    rms = get_spec("rms_norm").sweep_shape(MODEL, 1)
    out = [
        ("rms_norm", "rms_norm", rms.replace(residual=0)),
        ("rms_norm+residual", "rms_norm", rms.replace(residual=1)),
    ]
    out += [
        (n, n, get_spec(n).sweep_shape(MODEL, 1)) for n in ("silu_and_mul", "rotary_embedding", "reshape_and_cache")
    ]
    attn = get_spec("paged_attention")
    decode = attn.sweep_shape(MODEL, 1)
    out.append(("paged_attention", "paged_attention", decode.replace(context=255)))
    for label, num_tokens, series in (
        ("attn decode 1x1K", 1, "decode 1K keys"),
        ("attn prompt 16", 16, "prefill causal"),
        ("attn 8x4 draft at 4K", 32, "speculative 4 tokens at 4K keys"),
    ):
        out.append((label, "paged_attention", attn.series_at(MODEL, num_tokens)[series]))
    out.append(("fused_moe mixtral 1", "fused_moe", get_spec("fused_moe").sweep_shape(MODELS["mixtral-8x7b"], 1)))
    return out


class _RunCounter:
    """Counts ``JITFunction.run`` calls by the cache-key helper only it calls (patching ``run`` itself would turn the
    fast path off)."""

    def __init__(self):
        self.n = 0
        self._real = triton_jit.compute_cache_key

    def __enter__(self):
        def counted(*a):
            self.n += 1
            return self._real(*a)

        triton_jit.compute_cache_key = counted
        return self

    def __exit__(self, *exc):
        triton_jit.compute_cache_key = self._real


def torch_baseline(dtype: torch.dtype, device: torch.device) -> Provider:
    """SDPA of one query over 256 keys, 32 heads of 128: a torch-only call of about a decode call's host work."""
    q = torch.randn(1, 32, 1, 128, dtype=dtype, device=device)
    k = torch.randn(1, 32, 256, 128, dtype=dtype, device=device)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return Provider("torch", "SDPA, one query over 256 keys", lambda _inputs: sdpa(q, k, k))


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def check_same(spec, inputs: dict) -> str:
    """One call on the normal path and one on the fast path, on copies of ``inputs``: '' if bit-identical and the
    fast call skipped JITFunction.run, else what differed."""
    _launch.set_enabled(True)
    spec.call(clone_inputs(inputs))  # the launcher keeps this specialization's kernel
    _launch.set_enabled(False)
    normal = spec.call(clone_inputs(inputs))
    _launch.set_enabled(True)
    with _RunCounter() as runs:
        fast = spec.call(clone_inputs(inputs))
    torch.cuda.synchronize()
    problems = [f"{k} differs" for k in normal if not torch.equal(_bits(normal[k]), _bits(fast[k]))]
    if runs.n:
        problems.append(f"fast call went through JITFunction.run {runs.n}x")
    return "; ".join(problems)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--inductor", action="store_true", help="also time torch.compile(reference)")
    ap.add_argument(
        "--torch-baseline", action="store_true", help="also time a torch-only call interleaved with the fast path"
    )
    ap.add_argument("--only", nargs="+", metavar="LABEL", help="time only these cases (labels as printed)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows, with the card and versions, as JSON")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("host_overhead.py needs a CUDA GPU", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    device = torch.device("cuda")
    ok, why = _launch.available()
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}  fast launch: {why}")

    rows, failed = [], False
    for label, name, shape in cases():
        if args.only and label not in args.only:
            continue
        spec = get_spec(name)
        inputs = spec.make_inputs(shape, dtype, Fill("randn", device))
        same = check_same(spec, inputs)
        failed |= bool(same)
        times = {}
        for mode, flag in (("normal", False), ("fast", True)):
            _launch.set_enabled(flag)
            times[mode] = host_overhead(spec.call, inputs, device, calls=args.calls).median_us
        _launch.set_enabled(True)
        if args.inductor:
            prov = make_provider("inductor", spec, dtype)
            prov.begin_shape(shape)
            times["inductor"] = host_overhead(prov, inputs, device, calls=args.calls).median_us
        if args.torch_baseline:
            got, errors = interleaved_host_overhead(
                [Provider("fast", "the fast path", spec.call), torch_baseline(dtype, device)],
                inputs,
                device,
                calls=args.calls,
            )
            if errors:
                raise RuntimeError(errors)
            times["fast_il"], times["torch"] = got["fast"]["min_us"], got["torch"]["min_us"]
            times["ratio"] = times["fast_il"] / times["torch"]
        rows.append((label, times, same or "bit-identical"))

    cols = ["normal", "fast"] + (["inductor"] if args.inductor else [])
    cols += ["fast_il", "torch", "ratio"] if args.torch_baseline else []
    how = "median of 3; fast_il and torch: min of the interleaved rounds"
    print(f"\nhost us per eager call ({args.dtype}, {args.calls} calls, {how})")
    print(f"{'op':<20}" + "".join(f"{c:>10}" for c in cols) + f"{'saved':>9}  outputs")
    for label, times, same in rows:
        saved = 1 - times["fast"] / times["normal"]
        cells = "".join(f"{times[c]:>10.2f}" if c == "ratio" else f"{times[c]:>10.1f}" for c in cols)
        print(f"{label:<20}" + cells + f"{saved:>8.0%}  {same}")
    if args.json:
        record = {
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "fast_launch": why,
            "dtype": args.dtype,
            "calls": args.calls,
            "rows": [{"case": label, **times, "outputs": same} for label, times, same in rows],
        }
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    return 1 if failed or not ok else 0


if __name__ == "__main__":
    sys.exit(main())
