"""The OpSpec of moe_align_block_size.

The op reads no activations: the case dtype (bfloat16, the expert layer's) only names the case, and the
shape carries the rest. Shape knobs besides the sizes: ``ids_dtype`` ("int32" or "int64"); ``ids``: "routed"
(each token's topk distinct experts, at random), "hot" (every slot on the last expert: one run across every
chunk) or "invalid" (routed, with every fifth slot out of range: -1, num_experts, and 2^32 + 1 for int64, which
must not alias expert 1); ``expert_map``: 1 for a map that puts every third expert on another rank (-1).
"""

import torch

from ...spec import OpSpec, Shape, Work
from ...tolerance import Tolerance
from .api import moe_align_block_size
from .config import CHUNK, SMALL_MAX, max_padded
from .reference import moe_align_block_size_reference


def _expert_map(num_experts: int, device) -> torch.Tensor:
    """Experts 0, 3, 6, ... on another rank (-1); the rest numbered in order on this one."""
    here = torch.arange(num_experts, device=device) % 3 != 0
    return torch.where(here, torch.cumsum(here.int(), 0) - 1, -1).to(torch.int32)


def make_inputs(shape: Shape, dtype: torch.dtype, fill) -> dict:
    t, k, e = shape["num_tokens"], shape["topk"], shape["num_experts"]
    ids_dtype = getattr(torch, shape["ids_dtype"])
    if shape["ids"] == "hot":
        ids = torch.full((t, k), e - 1, dtype=ids_dtype, device=fill.device)
    else:
        # distinct experts per token, as a router's top-k: the first k of a random order of the experts
        ids = fill((t, e), torch.float32, family="randn").argsort(dim=-1)[:, :k].to(ids_dtype).contiguous()
    if shape["ids"] == "invalid" and fill.device.type != "meta":
        bad = [-1, e] + ([2**32 + 1] if ids_dtype == torch.int64 else [])
        flat = ids.view(-1)
        for i, b in enumerate(bad):
            flat[5 * i + 4 :: 5 * len(bad)] = b
    inputs = {"topk_ids": ids, "block_size": shape["block_size"], "num_experts": e, "expert_map": None}
    if shape["expert_map"]:
        inputs["expert_map"] = _expert_map(e, fill.device)
    return inputs


def call(inputs: dict) -> dict:
    s, b, n = moe_align_block_size(
        inputs["topk_ids"], inputs["block_size"], inputs["num_experts"], inputs["expert_map"]
    )
    return {"sorted_token_ids": s, "expert_ids": b, "num_tokens_post_padded": n}


def reference(inputs: dict, dtype: torch.dtype) -> dict:
    s, b, n = moe_align_block_size_reference(
        inputs["topk_ids"], inputs["block_size"], inputs["num_experts"], inputs["expert_map"]
    )
    return {"sorted_token_ids": s, "expert_ids": b, "num_tokens_post_padded": n}


def work(shape: Shape, dtype: torch.dtype) -> Work:
    numel, bs = shape["num_tokens"] * shape["topk"], shape["block_size"]
    padded = max_padded(numel, bs, shape["num_experts"])
    ids_bytes = 4 if shape["ids_dtype"] == "int32" else 8
    # ids read, the three int32 outputs written (the count table between launches is the op's own overhead)
    return Work(bytes=numel * ids_bytes + 4 * (padded + -(-padded // bs) + 1))


def sweep_shape(model, num_tokens: int) -> Shape | None:
    if not model.is_moe:
        return None
    # the GEMM's block rows: 16 while there are fewer tokens than experts, then 64 (vLLM's default fused_moe
    # config); block_size is a runtime argument of the kernels, so the switch compiles nothing
    bs = 16 if num_tokens <= model.num_experts else 64
    return _shape(num_tokens, model.topk, model.num_experts, bs, "int32")


def _shape(t, k, e, bs, ids_dtype="int32", ids="routed", expert_map=0) -> Shape:
    return Shape(
        num_tokens=t, topk=k, num_experts=e, block_size=bs, ids_dtype=ids_dtype, ids=ids, expert_map=expert_map
    )


_T_SMALL = SMALL_MAX // 8  # tokens at top-8 that fill the one-program path
_BOUNDARY = (
    _shape(1, 1, 1, 1),  # one expert, one slot, block_size 1
    _shape(1, 8, 256, 16),  # DeepSeek-V3 decode: numel < num_experts, so max_padded = numel * block_size
    _shape(3, 2, 8, 16, "int64"),  # Mixtral
    _shape(4, 8, 8, 16),  # topk = num_experts
    _shape(17, 4, 60, 3, expert_map=1),  # non-power-of-two experts and block_size
    _shape(9, 8, 64, 16, ids="hot"),
    _shape(10, 8, 32, 16, "int64", ids="invalid"),
    _shape(_T_SMALL, 8, 128, 16),  # the most the one-program path takes
    _shape(_T_SMALL + 1, 8, 128, 16, expert_map=1),  # the fewest for the three-launch path: 2 chunks
    _shape(CHUNK // 8 * 3 + 5, 8, 128, 64, "int64", ids="invalid"),  # 3 chunks plus a ragged one
    _shape(70, 8, 8, 16, ids="hot"),  # one run across every chunk
    _shape(100, 6, 60, 5, "int64"),
    _shape(65, 8, 512, 64, expert_map=1),  # 512 experts
)

# Every output is an integer, compared exactly whatever the tolerance: this entry says so in reports, in place of
# bfloat16's (atol the smallest positive float rather than 0, so a float output added later has no 0 bound)
EXACT = Tolerance(0.0, 5e-324, "integer outputs: the reference reproduces them exactly")

SPEC = OpSpec(
    name="moe_align_block_size",
    fn=moe_align_block_size,
    make_inputs=make_inputs,
    call=call,
    reference=reference,
    boundary=_BOUNDARY,
    sweep_shape=sweep_shape,
    # none: the api rejects a max_padded past int32, so every position and slot index fits int32; ids, counts
    # and outputs stay far below 2^31 elements
    large=(),
    work=work,
    # the layer's activation dtype, which the op never reads: one case per shape
    dtypes=(torch.bfloat16,),
    tolerance={torch.bfloat16: EXACT},
    # int32 whatever the case's dtype (which the op never reads)
    output_dtypes={"sorted_token_ids": torch.int32, "expert_ids": torch.int32, "num_tokens_post_padded": torch.int32},
    not_compilable="its reference sorts with data-dependent sizes (boolean-mask indexing): a graph break",
    description="group MoE token slots by expert, each run padded to the GEMM's block size (vLLM's "
    "moe_align_block_size)",
)
