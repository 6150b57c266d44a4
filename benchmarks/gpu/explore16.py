"""Sixteenth exploration on the H200: why causal prefill at 8K measures 443-456 TFLOP/s from run to run (SDPA/cuDNN
beside it: 529.9-530.6). The same prefill timed 12 times in one process (time_calls as paged_attention.py does, a new
graph each time), alternating with cuDNN, with the SM clock, power and temperature read (nvidia-smi) after each;
then 4 more after a 5 s idle.
PYTHONPATH=src:.peers python3 benchmarks/gpu/explore16.py ; JSON to $OUT/exp16.json"""
import json, os, subprocess, sys, time
import torch
import triton

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import paged_attention as PA  # noqa: E402
from tritonkit.ops import get_spec  # noqa: E402

OUT = os.path.join(os.environ.get("OUT", "."), "exp16.json")
R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__}, "rows": []}
T0 = time.perf_counter()


def smi():
    q = "clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    return subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.strip()


b = PA.Batch("prefill 8K causal", [8192], [0])
sets = [PA.make_batch(b, seed=i) for i in range(8)]
flops = get_spec("paged_attention").work(b.shape(), PA.DT).flops
for i in range(16):
    if i == 12:
        time.sleep(5)
    for prov in ("tritonkit", "sdpa"):
        fns = [PA.tritonkit_fn(inp) if prov == "tritonkit" else PA.sdpa_fn(inp, b) for inp in sets]
        us = PA.time_calls(fns)
        row = dict(i=i, provider=prov, us=round(us, 2), tflops=round(flops / (us * 1e-6) / 1e12, 1), smi=smi(),
                   t=round(time.perf_counter() - T0, 1))
        R["rows"].append(row)
        print(row, flush=True)
        with open(OUT, "w") as f:
            json.dump(R, f, indent=1)
