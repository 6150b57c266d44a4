"""Tile/warp sweep for the memory-bound ops whose config.py heuristics need a measurement behind them.

Each variant replaces the op's config function for the duration of its timing; correctness is checked against
the float64 reference before each variant is timed. Usage (H200, through the device tool):
    PYTHONPATH=src python3 benchmarks/gpu/tune_memops.py
"""

import dataclasses
import itertools
import json
import os

import torch

from tritonkit import ops
from tritonkit.bench.ceilings import measure_copy_gbps
from tritonkit.bench.stats import rotation_sets
from tritonkit.bench.timing import time_graph
from tritonkit.models import MODELS
from tritonkit.ops.reshape_and_cache import api as rc_api, config as rc_cfg
from tritonkit.ops.rotary_embedding import api as ro_api, config as ro_cfg
from tritonkit.testing import Fill, validate_case


def time_op(name, shape):
    spec = ops.get_spec(name)
    w = spec.work(shape, torch.bfloat16)
    n_sets = rotation_sets(w.bytes, torch.cuda.get_device_properties(0).L2_cache_size, max_sets=64)
    sets = [spec.make_inputs(shape, torch.bfloat16, Fill("randn", "cuda", seed=i)) for i in range(n_sets)]
    us = time_graph(spec.call, sets, torch.device("cuda")).median_us
    return us, w.bytes / us / 1e3


def sweep(name, api_mod, fn_name, base_fn, variants, models, tokens, ceiling, rows):
    for label, make in variants:
        setattr(api_mod, fn_name, make)
        try:
            for m, t in itertools.product(models, tokens):
                shape = ops.get_spec(name).sweep_shape(MODELS[m], t)
                ok = validate_case(ops.get_spec(name), shape, torch.bfloat16, "randn", device="cuda").passed
                us, gbs = time_op(name, shape) if ok else (float("nan"), float("nan"))
                rows.append(dict(op=name, variant=label, model=m, num_tokens=t, us=us, gbs=gbs,
                                 pct=100 * gbs / ceiling, correct=ok))
                print(f"{name:<18} {label:<28} {m:<15} {t:>6} {us:9.2f} us {gbs:7.0f} GB/s {100 * gbs / ceiling:5.1f}%"
                      f"{'' if ok else '  WRONG'}", flush=True)
        finally:
            setattr(api_mod, fn_name, base_fn)


def main():
    ceiling, _ = measure_copy_gbps(torch.device("cuda"))
    print(f"copy ceiling {ceiling:.0f} GB/s")
    rows = []

    ro_variants = []
    for tile, warps in itertools.product((2048, 4096, 8192, 16384), (2, 4, 8, None)):
        def f(hq, hk, rot, e, tile=tile, warps=warps):
            old = ro_cfg.TILE
            ro_cfg.TILE = tile
            try:
                c = ro_cfg.rotary_config.__wrapped__(hq, hk, rot, e)
            finally:
                ro_cfg.TILE = old
            return dataclasses.replace(c, num_warps=warps or c.num_warps)
        ro_variants.append((f"tile={tile},warps={warps or 'auto'}", f))
    sweep("rotary_embedding", ro_api, "rotary_config", ro_api.rotary_config, ro_variants,
          ["llama3-8b", "llama3-70b-tp8"], [4096, 16384, 65536], ceiling, rows)

    rc_variants = []
    for tile, max_t, warps in itertools.product((8192, 16384, 32768), (4, 8, 16), (4, 8, None)):
        def f(h, d, e, tile=tile, max_t=max_t, warps=warps):
            old = (rc_cfg.TILE_BYTES, rc_cfg.MAX_BLOCK_T)
            rc_cfg.TILE_BYTES, rc_cfg.MAX_BLOCK_T = tile, max_t
            try:
                c = rc_cfg.reshape_and_cache_config.__wrapped__(h, d, e)
            finally:
                rc_cfg.TILE_BYTES, rc_cfg.MAX_BLOCK_T = old
            return dataclasses.replace(c, num_warps=warps or c.num_warps)
        rc_variants.append((f"tile={tile},max_t={max_t},warps={warps or 'auto'}", f))
    sweep("reshape_and_cache", rc_api, "reshape_and_cache_config", rc_api.reshape_and_cache_config, rc_variants,
          ["llama3-8b"], [4096, 16384, 65536], ceiling, rows)

    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "tune_memops.json"), "w") as fh:
            json.dump({"gpu": torch.cuda.get_device_name(), "ceiling_GBps": ceiling, "rows": rows}, fh, indent=1)
    print("\nbest per (op, model, num_tokens):")
    best = {}
    for r in rows:
        k = (r["op"], r["model"], r["num_tokens"])
        if r["correct"] and (k not in best or r["gbs"] > best[k]["gbs"]):
            best[k] = r
    for k, r in best.items():
        print(f"{k[0]:<18} {k[1]:<15} {k[2]:>6}  {r['variant']:<28} {r['pct']:5.1f}%")


if __name__ == "__main__":
    main()
