"""Compile fused_moe's GEMMs at every tile config the MoE models' sweep picks, from the default rule and from the
shipped tuned tables, for sm_90 on this CPU and print one JSON line per distinct (model, GEMM, config, layout):
shared memory, registers, local memory, tensor-core MMA kind.

Run in its own process with the interpreter off (the kernel module reads the interpreter flag at import):
``TRITON_INTERPRET=0 python3 tests/ops/fused_moe_resources.py``; test_fused_moe_resources.py does.
"""

import json
import os

os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402

from tritonkit.check.resources import compile_resources  # noqa: E402
from tritonkit.models import MODELS, NUM_TOKENS_SWEEP  # noqa: E402
from tritonkit.ops.fused_moe import api as A  # noqa: E402
from tritonkit.ops.fused_moe import config as C  # noqa: E402
from tritonkit.ops.fused_moe import kernel as K  # noqa: E402

FP8 = torch.float8_e4m3fn
KERNEL_QUANT = {"none": 0, "fp8_tensor": 1, "fp8_channel": 1, "fp8_block128": 2}


def meta(*size, dtype=torch.bfloat16):
    return torch.empty(*size, dtype=dtype, device="meta")


def gemm_resources(which, g, E, N, Kd, topk, quant, slots):
    wdt = FP8 if quant != "none" else torch.bfloat16
    block = quant == "fp8_block128"
    tma = g.block_m >= C.TMA_MIN_ROWS
    ids, blocks, total = meta(1024, dtype=torch.int32), meta(128, dtype=torch.int32), meta(1, dtype=torch.int32)
    weights, scales = meta(64, topk, dtype=torch.float32), meta(64, 64, dtype=torch.float32)
    ce = dict(
        BLOCK_M=g.block_m,
        BLOCK_N=g.block_n,
        BLOCK_K=g.block_k,
        GROUP_M=g.group_m,
        QUANT=KERNEL_QUANT[quant],
        ACT_BF16=True,
        SWAP_AB=bool(g.swap_ab),
        SLOTS=bool(slots),
        HAS_MAP=False,
        num_warps=g.num_warps,
        num_stages=g.num_stages,
    )
    if which == "gemm1":
        a, w = meta(64, Kd, dtype=wdt), meta(E, 2 * N, Kd, dtype=wdt)
        h = meta(128, N, dtype=FP8 if block else torch.bfloat16)
        # the model widths are 16-byte aligned: wgmma tiles load the weights through tensor descriptors, as on the card
        return compile_resources(
            K._fused_moe_gemm1_kernel,
            a,
            scales,
            A._desc(w.view(E, 2, N, Kd), 1, 2, g.block_n, g.block_k) if tma else w,
            scales,
            h,
            scales,
            weights,
            ids,
            blocks,
            total,
            128,
            10,
            N,
            Kd,
            E,
            Kd,
            64,
            1,
            2 * N * Kd,
            Kd,
            64,
            64,
            1,
            N,
            64,
            ids,
            ids,
            ids,
            E,
            64,
            topk,
            TOPK=topk,
            ROUTED_ON_INPUT=False,
            GELU=False,
            H_FP8=block,
            W_HALF_SCALES=block and N % C.SCALE_BLOCK == 0,
            W_TMA=tma,
            ZERO_BLOCK=16,
            **ce,
        )
    h, w, c = meta(128, N, dtype=wdt), meta(E, Kd, N, dtype=wdt), meta(128, Kd)
    return compile_resources(
        K._fused_moe_gemm2_kernel,
        A._desc(h, g.block_m, g.block_k) if tma else h,
        scales,
        A._desc(w.view(E * Kd, N), g.block_n, g.block_k) if tma else w,
        scales,
        c,
        weights,
        ids,
        blocks,
        total,
        128,
        10,
        Kd,
        N,
        E,
        N,
        64,
        1,
        Kd * N,
        N,
        64,
        64,
        1,
        Kd,
        c,
        ids,
        ids,
        ids,
        E,
        topk,
        Kd,
        TOPK=topk,
        MUL_WEIGHT=True,
        TMA=tma,
        **ce,
    )


def picks(m, M: int, quant: str):
    """(source, config): the default rule's, and the config lookup's on each card a shipped table names."""
    layer = (M, m.num_experts, m.moe_intermediate, m.hidden)
    yield "default", C.default_config(*layer, m.topk, quant)
    for device in sorted({key[5] for key in C._tables(str(C.CONFIG_DIR))}):
        if (cfg := C.lookup(*layer, "bfloat16", quant, device)) is not None:
            yield f"{device} table", cfg


def main():
    seen = set()
    for name in ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"):
        m = MODELS[name]
        quant = m.moe_quant or "none"
        for M in NUM_TOKENS_SWEEP:
            for source, cfg in picks(m, M, quant):
                for which, g in (("gemm1", cfg.gemm1), ("gemm2", cfg.gemm2)):
                    if (name, which, g, cfg.slots) in seen:
                        continue
                    seen.add((name, which, g, cfg.slots))
                    r = gemm_resources(which, g, m.num_experts, m.moe_intermediate, m.hidden, m.topk, quant, cfg.slots)
                    print(
                        json.dumps(
                            {
                                "model": name,
                                "M": M,
                                "source": source,
                                "gemm": which,
                                "config": dict(vars(g)),
                                "slots": cfg.slots,
                                "shared_bytes": r.shared_bytes,
                                "max_shared_bytes": r.max_shared_bytes,
                                "registers": r.registers,
                                "stack_bytes": r.stack_bytes,
                                "local_bytes": r.local_bytes,
                                "wgmma": r.wgmma,
                                "mma": r.mma,
                            }
                        ),
                        flush=True,
                    )


if __name__ == "__main__":
    main()
