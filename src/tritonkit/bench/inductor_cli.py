"""``tritonkit inductor OP [--model M] [--shape k=v,...] [--dtype D] [--out DIR] [--dynamic]``

Writes the code Inductor generates for the op's eager reference (``torch.compile(reference)``, as bench's
``inductor`` provider runs it) and prints the file and the kernels in it. On a GPU that is Triton, worth reading
before writing a kernel; on a CPU Inductor emits C++ (OpenMP loops), and that is what gets written.
"""

from __future__ import annotations

import argparse
import pathlib
import hashlib
import re
import sys

#: characters of a written file's shape part: the name (with "inductor_", the device and ".py") stays under 255
_MAX_STEM = 200
#: ``name = async_compile.triton('name', '''...`` (GPU) / ``name = async_compile.cpp_pybinding([...], '''...`` (CPU)
_KERNEL_RE = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.MULTILINE)
DEFAULT_TOKENS = 4096
#: the default where the sweep point counts sequences, not tokens (paged_attention's decode batch): the oracle loops
#: over sequences in Python and Dynamo unrolls the loop, so compile time and memory grow with the count (128
#: sequences: 3 min and 8 GB on a CPU; 4096 did not finish in 5 min)
DEFAULT_SEQS = 8


def kernel_names(code: str) -> list[tuple[str, str]]:
    """(name, kind) of each kernel a piece of Inductor output code compiles; kind is 'triton', 'cpp_pybinding'..."""
    return [(m.group(1), m.group(2)) for m in _KERNEL_RE.finditer(code)]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tritonkit inductor",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("op", help="a built-in op (rms_norm, silu_and_mul, ...)")
    p.add_argument(
        "--model", help="model config of the shape (default: llama3-8b, or for the expert ops the first MoE model)"
    )
    p.add_argument(
        "--shape",
        default="",
        metavar="k=v,...",
        help=f"shape keys over the model's sweep point (default num_tokens={DEFAULT_TOKENS}; "
        f"{DEFAULT_SEQS} for an op whose sweep counts sequences, as paged_attention's num_seqs)",
    )
    p.add_argument("--dtype", default="bfloat16", help="default: bfloat16")
    p.add_argument("--out", default="out/inductor", metavar="DIR", help="where the generated code goes")
    p.add_argument("--dynamic", action="store_true", help="compile with dynamic=True (default: static shapes)")
    return p


def _err(msg: str) -> int:
    print(f"tritonkit inductor: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    import torch

    from ..models import MODELS
    from ..ops import get_spec
    from ..testing.inputs import Fill
    from .runner import parse_kv

    try:
        spec = get_spec(args.op)
    except ValueError as e:
        return _err(str(e))
    if args.model is None:
        from ..models import DEFAULT_MOE_BENCH_MODELS

        args.model = next(
            (m for m in ("llama3-8b", *DEFAULT_MOE_BENCH_MODELS) if spec.has_layer(MODELS[m])), "llama3-8b"
        )
    if args.model not in MODELS:
        return _err(f"unknown model {args.model!r}; known: {', '.join(MODELS)}")
    dtype = getattr(torch, args.dtype, None)
    if not isinstance(dtype, torch.dtype):
        return _err(f"unknown dtype {args.dtype!r}")
    try:
        kv = parse_kv(args.shape)
    except ValueError as e:
        return _err(str(e))
    tokens = kv.pop("num_tokens", None)
    if tokens is not None and (not isinstance(tokens, int) or tokens < 1):
        return _err(f"--shape num_tokens must be a positive integer, got {tokens!r}")
    model = MODELS[args.model]
    if not spec.has_layer(model):
        having = [m for m in MODELS if spec.has_layer(MODELS[m])]
        return _err(f"{args.model} has no layer {spec.name} implements; --model one of: {', '.join(having)}")
    # num_tokens picks the sweep point; an op may spend it on another key (paged_attention: num_seqs)
    base = spec.sweep_shape(model, tokens or DEFAULT_TOKENS)
    if tokens is None and "num_tokens" not in base:
        base = spec.sweep_shape(model, DEFAULT_SEQS)
    unknown = set(kv) - set(base)
    if unknown:
        return _err(f"{spec.name} has no shape key(s) {sorted(unknown)}; its keys: {', '.join(base)}")
    for k, v in kv.items():
        if isinstance(base[k], int) and (not isinstance(v, int) or isinstance(v, bool)):
            return _err(f"--shape {k} must be an integer (like {base[k]}), got {v!r}")
    shape = base.replace(**kv)
    out = pathlib.Path(args.out)
    # found now, not after a compile of minutes
    if out.exists() and not out.is_dir():
        return _err(f"--out {args.out!r} is a file; it names the directory the generated code goes in")

    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda" if on_gpu else "cpu")
    if not on_gpu:
        print(
            "tritonkit inductor: no CUDA GPU here, so Inductor emits C++ for the CPU (OpenMP loops), not Triton; "
            "writing what it produced. Run it on a GPU for the Triton kernel bench's inductor provider times."
        )

    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    inputs = spec.make_inputs(shape, dtype, Fill("randn", device, 0))
    ref = spec.reference
    fn = torch.compile(lambda inp: ref(inp, dtype), dynamic=args.dynamic)
    # a cache hit could skip code generation; this command exists to see the code
    with inductor_config.patch(fx_graph_cache=False):
        _, codes = run_and_get_code(fn, inputs)
    if not codes:
        return _err(f"Inductor produced no code for {spec.name} [{shape.id}] (graph break or nothing to compile?)")

    names = [n for c in codes for n in kernel_names(c)]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return _err(f"--out {args.out!r}: cannot make the directory ({e.strerror or e})")
    stem = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{spec.name}_{args.dtype}_{shape.id}").replace(",", "_")
    if len(stem) > _MAX_STEM:
        # a file name holds 255 bytes: a long shape id (a dozen keys) keeps its start and a digest of the whole
        digest = hashlib.sha1(stem.encode()).hexdigest()[:12]
        stem = f"{stem[: _MAX_STEM - 13]}_{digest}"
    path = out / f"inductor_{stem}_{device.type}.py"
    header = (
        f"# Inductor output for tritonkit op {spec.name}: torch.compile(reference, dynamic={args.dynamic})\n"
        f"# shape {shape.id}, dtype {args.dtype}, device {device.type}"
        f"{' (' + torch.cuda.get_device_name() + ')' if on_gpu else ''}, torch {torch.__version__}\n"
        f"# command: tritonkit inductor {' '.join(argv)}\n"
        f"# kernels: {', '.join(f'{n} ({k})' for n, k in names) or 'none'}\n"
    )
    sep = "\n\n# " + "-" * 100 + " next compiled graph\n\n"
    try:
        path.write_text(header + "\n" + sep.join(codes))
    except OSError as e:
        return _err(f"cannot write {path} ({e.strerror or e})")
    print(f"wrote {path}")
    lang = "Triton" if any(k == "triton" for _, k in names) else "C++" if names else "no"
    print(f"{len(codes)} compiled graph(s), {len(names)} {lang} kernel(s):")
    for n, k in names:
        print(f"  {n}  [{k}]")
    return 0
