"""Third exploration on the H200: decode programs-per-SM (split count) x pipeline stages with the one-load merge.
PYTHONPATH=src:.peers python3 benchmarks/gpu/explore3.py ; JSON to $OUT/exp3.json."""
import dataclasses, json, os, sys, time
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paged_attention as PA  # noqa: E402
from tritonkit.ops.paged_attention import config as pcfg  # noqa: E402

R = {"meta": {"git_sha": os.environ.get("TRITONKIT_GIT_SHA"), "gpu": torch.cuda.get_device_name()}, "rows": []}
cases = [PA.Batch("b1 4K", [1], [4095]), PA.Batch("b4 4K", [1] * 4, [4095] * 4),
         PA.Batch("b16 4K", [1] * 16, [4095] * 16), PA.Batch("b64 4K", [1] * 64, [4095] * 64),
         PA.Batch("b1 32K", [1], [32767]), PA.Batch("b4 32K", [1] * 4, [32767] * 4)]
base_dec, base_per_sm = pcfg.decode_config, pcfg.DECODE_PROGRAMS_PER_SM
for per_sm in (3, 4, 5, 6, 8):
    for stages in (3, 4):
        pcfg.DECODE_PROGRAMS_PER_SM = per_sm
        pcfg.decode_config = lambda *a, _s=stages: dataclasses.replace(base_dec(*a), num_stages=_s)
        for b in cases:
            rs = PA.bench_one(b, {"tritonkit": PA.tritonkit_fn}, 1.0)
            cfg = base_dec(4, 128, 2, len(b.q_lens), 8, max(b.seq_k), 132)
            r = dict(case=b.name, per_sm=per_sm, stages=stages, splits=cfg.num_splits, us=rs[0]["us"],
                     gbps=rs[0]["kv_gbps"])
            R["rows"].append(r)
            print(r, flush=True)
pcfg.decode_config, pcfg.DECODE_PROGRAMS_PER_SM = base_dec, base_per_sm
with open(os.path.join(os.environ.get("OUT", "."), "exp3.json"), "w") as f:
    json.dump(R, f, indent=1)
print(f"{'case':8}" + "".join(f"{f'{p}/{s}':>9}" for p in (3, 4, 5, 6, 8) for s in (3, 4)))
for b in cases:
    print(f"{b.name:8}" + "".join(f"{r['us']:>9.2f}" for r in R["rows"] if r["case"] == b.name))
