import dataclasses
import json

import pytest
import torch
import triton
from conftest import DEVICE

import tritonkit.ops.fused_moe.api as api
import tritonkit.ops.fused_moe.config as config
import tritonkit.ops.fused_moe.reference as ref_mod
import tritonkit.ops.fused_moe.spec as spec_mod
from tritonkit.ops import poison_outputs
from tritonkit.ops._launch import launch
from tritonkit.testing import Fill, assert_valid, compare

SPEC = spec_mod.SPEC
reference, dequantize_weight = ref_mod.fused_moe_reference, ref_mod.dequantize_weight
fused_moe = api.fused_moe

DTYPES = (torch.float16, torch.bfloat16)
DT_IDS = ("fp16", "bf16")
# one decode-rule shape, block-wise fp8 across two 128-blocks, the prefill rule: the other families run on these
FAMILY_SHAPES = [SPEC.boundary[i] for i in (2, 4, 10)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("shape", SPEC.boundary, ids=lambda s: s.id)
def test_boundary_randn(shape, dtype):
    assert_valid(SPEC, shape, dtype, "randn", device=DEVICE)


@pytest.mark.parametrize("family", [f for f in SPEC.families if f != "randn"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("shape", FAMILY_SHAPES, ids=lambda s: s.id)
def test_families(shape, dtype, family):
    assert_valid(SPEC, shape, dtype, family, device=DEVICE)


def _inputs(dtype=torch.bfloat16, **kw):
    shape = {"num_tokens": 9, "hidden": 96, "inter": 80, "experts": 8, "topk": 2, "quant": "none"}
    shape.update(kw)
    inputs = spec_mod.make_inputs(spec_mod.Shape(shape), dtype, Fill("randn", DEVICE, 0))
    inputs.pop("act_dtype")
    return inputs


def _args(inputs):
    pos, kw = spec_mod._split(inputs)
    return pos, kw


def _check(out, inputs):
    pos, kw = _args(inputs)
    ref = reference(
        *(t.double() if t.is_floating_point() else t for t in pos),
        act_dtype=pos[0].dtype,
        **{k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in kw.items()},
    )
    c = compare(out, ref, SPEC.tolerance_for(pos[0].dtype))
    assert c.passed, c.describe()


def test_fp8_quantization_is_applied():
    # the fp8 output follows the fp8 reference exactly, and is measurably off the unquantized layer
    inputs = _inputs(torch.float16, quant="fp8_block128", hidden=200, inter=160)
    out = fused_moe(*_args(inputs)[0], **_args(inputs)[1])
    _check(out, inputs)
    pos, kw = _args(inputs)
    w1 = dequantize_weight(pos[1], kw["w1_scale"].double(), kw["block_shape"]).double()
    w2 = dequantize_weight(pos[2], kw["w2_scale"].double(), kw["block_shape"]).double()
    plain = reference(pos[0].double(), w1, w2, pos[3].double(), pos[4], act_dtype=torch.float16)
    assert (out.double() - plain).abs().max() > 1e-3


def test_per_tensor_activation_scale_differs_from_per_token():
    # one outlier token: a per-tensor scale crushes the other tokens' resolution, a per-token one does not, and
    # each mode matches its own reference
    inputs = _inputs(torch.bfloat16, quant="fp8_tensor", num_tokens=8)
    inputs["hidden_states"][3] *= 200
    pos, kw = _args(inputs)
    per_token = fused_moe(*pos, **kw)
    per_tensor = fused_moe(*pos, **kw, per_act_token_quant=False)
    _check(per_token, inputs)
    _check(per_tensor, dict(inputs, per_act_token_quant=False))
    assert not torch.equal(per_token[0], per_tensor[0])


def test_empty_batch():
    inputs = _inputs(num_tokens=0)
    pos, kw = _args(inputs)
    out = fused_moe(*pos, **kw)
    assert out.shape == (0, 96) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("quant", ["none", "fp8_channel"])
def test_out_in_place(quant):
    inputs = _inputs(quant=quant)
    pos, kw = _args(inputs)
    # rows of a wider buffer: the row stride is not K
    big = torch.full((9, 128), 7.0, dtype=torch.bfloat16, device=DEVICE)
    out = big[:, 16 : 16 + 96]
    got = fused_moe(*pos, **kw, out=out)
    assert got is out
    _check(out, inputs)
    assert (big[:, :16] == 7).all() and (big[:, 112:] == 7).all()
    torch.testing.assert_close(out, fused_moe(*pos, **kw), rtol=0, atol=0)


def test_ids_out_of_range_contribute_nothing():
    # ids past E and negative ones are dropped (no host check, no out-of-bounds access): those slots add zero
    inputs = _inputs(num_tokens=6, topk=3)
    ids = inputs["topk_ids"].clone()
    ids[0, 1], ids[2, 0], ids[3, 2], ids[5, 1] = 8, -1, 1 << 30, -(1 << 30)
    inputs["topk_ids"] = ids
    pos, kw = _args(inputs)
    with poison_outputs():
        out = fused_moe(*pos, **kw)
    _check(out, inputs)
    # with an expert_map too: ids past the map's length are dropped, mapped -1 ones too
    inputs = _inputs(num_tokens=6, topk=3, local=3)
    ids = inputs["topk_ids"].clone()
    ids[1, 0], ids[4, 2] = 8, -5
    inputs["topk_ids"] = ids
    pos, kw = _args(inputs)
    with poison_outputs():
        out = fused_moe(*pos, **kw)
    _check(out, inputs)


def test_all_experts_elsewhere_gives_zeros():
    inputs = _inputs(local=3)
    inputs["expert_map"] = torch.full_like(inputs["expert_map"], -1)
    pos, kw = _args(inputs)
    with poison_outputs():
        out = fused_moe(*pos, **kw)
    assert (out == 0).all()


def test_topk_weights_in_activation_dtype():
    inputs = _inputs(torch.float16)
    inputs["topk_weights"] = inputs["topk_weights"].half()
    pos, kw = _args(inputs)
    _check(fused_moe(*pos, **kw), inputs)


def test_explicit_config_hook():
    # the tuner's path: any legal config gives the same layer
    inputs = _inputs(num_tokens=33, quant="fp8_block128", hidden=200, inter=160)
    pos, kw = _args(inputs)
    g = config.GemmConfig(block_m=32, block_n=128, block_k=32, group_m=2, num_warps=4, num_stages=2)
    cfg = config.FusedMoeConfig(g, dataclasses.replace(g, block_n=64, block_k=64))
    _check(api.forward(api.check_args(*pos, **kw), config=cfg), inputs)
    bad = config.FusedMoeConfig(dataclasses.replace(g, block_n=32), g)
    with pytest.raises(ValueError, match=r"^config\.gemm1\.block_n"):
        api.forward(api.check_args(*pos, **kw), config=bad)
    with pytest.raises(ValueError, match="block_m"):
        config.FusedMoeConfig(g, dataclasses.replace(g, block_m=64))


@pytest.mark.parametrize("rows,swap", [(16, 1), (64, 0)])
@pytest.mark.parametrize("inter", [48, 160, 224, 256])
def test_block_fp8_gemm1_in_two_column_tiles_computes_the_same_layer(rows, swap, inter):
    # block-wise fp8 at gemm1.block_n 64: a program computes its 128-column group of h as two 64-column tiles, one
    # after the other, and quantizes both with the group's one scale; a ragged last group masks part of the first
    # tile and all the second (inter 48), all the second (160), part of the second (224) or none (256). The same
    # float32 sums in the same K order as one 128-column tile: the same bits
    inputs = _inputs(num_tokens=9, quant="fp8_block128", hidden=256, inter=inter)
    pos, kw = _args(inputs)
    g2 = config.GemmConfig(rows, 64, 64, 1, 4, 2, swap)
    one = config.FusedMoeConfig(config.GemmConfig(rows, 128, 64, 1, 4, 2, swap), g2)
    two = config.FusedMoeConfig(config.GemmConfig(rows, 64, 64, 1, 4, 2, swap), g2)
    want = api.forward(api.check_args(*pos, **kw), config=one)
    with poison_outputs():
        got = api.forward(api.check_args(*pos, **kw), config=two)
    assert torch.equal(got, want)
    if got.device.type == "cpu":
        # _check's bf16 tolerance has no error scale and holds for the interpreter's exact dots, not the card's fp8
        # MMA (on the H200 both tile shapes miss it equally; test_deepseek_width_on_gpu checks the card)
        _check(got, inputs)


@pytest.mark.parametrize("block_k", [64, 128])
@pytest.mark.parametrize("rows", [16, 64])
def test_block_fp8_lazy_scaling_computes_the_same_layer(rows, block_k, monkeypatch):
    # LAZY_SCALE (both GEMMs, block-wise fp8): K block kb - 1's scaled tile is added before K block kb's dot instead
    # of right after its own; the same FMAs into the accumulator in the same K order, so the same bits either way
    inputs = _inputs(num_tokens=33, quant="fp8_block128", hidden=256, inter=256)
    pos, kw = _args(inputs)
    cfg = config.FusedMoeConfig(
        config.GemmConfig(rows, 128, block_k, 1, 4, 2), config.GemmConfig(rows, 128, block_k, 1, 4, 2)
    )
    lazy = []
    monkeypatch.setattr(
        api, "launch", lambda k, g, a, c, *r: lazy.append(c.get("LAZY_SCALE")) or launch(k, g, a, c, *r)
    )
    got = {}
    for on in (False, True):
        monkeypatch.setattr(config, "GEMM1_LAZY_SCALE", on)
        monkeypatch.setattr(config, "GEMM2_LAZY_SCALE", on)
        lazy.clear()
        got[on] = api.forward(api.check_args(*pos, **kw), config=cfg)
        assert [v for v in lazy if v is not None] == [on, on], lazy  # both GEMMs took the switch
    assert torch.equal(got[True], got[False])
    if got[True].device.type == "cpu":
        _check(got[True], inputs)


@pytest.mark.parametrize("quant", ["none", "fp8_channel", "fp8_block128"])
def test_swapped_operands_compute_the_same_layer(quant):
    # swap_ab: the weight tile is the MMA's left operand and the accumulator is transposed until the epilogue
    inputs = _inputs(num_tokens=9, quant=quant, hidden=200, inter=160)
    pos, kw = _args(inputs)
    g1 = config.GemmConfig(16, 128, 64, 1, 4, 2, swap_ab=1)
    g2 = config.GemmConfig(16, 64, 64, 1, 4, 2, swap_ab=1)
    _check(api.forward(api.check_args(*pos, **kw), config=config.FusedMoeConfig(g1, g2)), inputs)


@pytest.mark.parametrize("quant", ["none", "fp8_channel", "fp8_block128"])
@pytest.mark.parametrize("swap", [0, 1])
def test_descriptor_and_pointer_loads_compute_the_same_layer(quant, swap, monkeypatch):
    # weights (and GEMM2's sorted h) through tensor descriptors where TMA can address them, else pointer loads: the
    # same tiles, the same float32 sums in the same K order, so the same bits
    if swap and quant == "none":
        pytest.skip("bf16 tiles do not swap")
    inputs = _inputs(num_tokens=9, quant=quant, hidden=256, inter=160)
    pos, kw = _args(inputs)
    rows = config.TMA_MIN_ROWS  # the smallest tile that loads through descriptors
    g1 = config.GemmConfig(rows, 128, 64, 1, 4, 2, swap_ab=swap)
    cfg = config.FusedMoeConfig(g1, config.GemmConfig(rows, 64, 64, 1, 4, 2, swap))
    assert api._tma_ok(pos[1]) and api._tma_ok(pos[2])
    tma = api.forward(api.check_args(*pos, **kw), config=cfg)
    monkeypatch.setattr(api, "_tma_ok", lambda w: False)
    pointers = api.forward(api.check_args(*pos, **kw), config=cfg)
    assert torch.equal(tma, pointers)
    _check(tma, inputs)


@pytest.mark.parametrize(
    "quant,extra",
    [
        ("none", {}),
        ("fp8_channel", {}),
        ("fp8_block128", {}),
        ("none", {"local": 3}),
        ("none", {"topk": 1, "routed": True}),
        ("fp8_tensor", {"per_token": False}),
    ],
    ids=["bf16", "fp8_channel", "fp8_block128", "expert_map", "routed_on_input", "fp8_tensor_amax"],
)
def test_slot_blocks_compute_the_same_layer(quant, extra, monkeypatch):
    # blocks of one slot read from topk_ids and the top-k sum by GEMM2's last program: no alignment and no sum
    # launch, the same float32 sums in the same orders as the sorted layout, so the same bits
    extra = dict(extra)
    routed, per_token = extra.pop("routed", False), extra.pop("per_token", True)
    inputs = _inputs(num_tokens=5, quant=quant, hidden=200, inter=320, **extra)
    if routed:
        inputs["apply_router_weight_on_input"] = True
    if not per_token:
        inputs["per_act_token_quant"] = False
    pos, kw = _args(inputs)
    sorted_layout = api.forward(api.check_args(*pos, **kw))
    q = quant if quant != "none" else "none"
    cfg = dataclasses.replace(config.fused_moe_config(5, 8, 320, 200, pos[4].shape[1], "bfloat16", q, None), slots=1)
    launched = []
    monkeypatch.setattr(api, "_align", lambda *a, **k: pytest.fail("slot blocks need no alignment"))
    monkeypatch.setattr(api, "launch", lambda kernel, *a, **k: launched.append(kernel) or launch(kernel, *a, **k))
    out = torch.full((5, 216), 7.0, dtype=pos[0].dtype)[:, 8:208]
    with poison_outputs():
        got = api.forward(api.check_args(*pos, **kw, out=out), config=cfg)
    assert got is out and api._fused_moe_sum_kernel not in launched
    assert torch.equal(out, sorted_layout)
    _check(out, inputs)


@pytest.mark.parametrize("rows", [8, 16, 32])
@pytest.mark.parametrize(
    "extra", [{}, {"local": 3}, {"topk": 1, "routed": True}, {"inter": 96}], ids=["bf16", "map", "routed", "inter96"]
)
def test_gemm2_with_its_w2_tile_loaded_early_computes_the_layer(rows, extra, monkeypatch):
    # config.W2_EARLY_ROWS: a slot call's GEMM2 programs load their whole w2 tile (rows x the intermediate width,
    # padded) before anything GEMM1 writes and multiply h's row in on the CUDA cores; the output columns a program
    # covers follow `rows`, and a last partial column tile, an intermediate width that is no power of two, slots no
    # expert here takes and routing on the input hold
    extra = dict(extra)
    routed = extra.pop("routed", False)
    inter = extra.pop("inter", 320)
    inputs = _inputs(num_tokens=3, hidden=200, inter=inter, **extra)
    if routed:
        inputs["apply_router_weight_on_input"] = True
    ids = inputs["topk_ids"].clone()
    ids[1, 0] = -1
    inputs["topk_ids"] = ids
    pos, kw = _args(inputs)
    cfg = dataclasses.replace(
        config.fused_moe_config(3, 8, inter, 200, pos[4].shape[1], "bfloat16", "none", None), slots=1
    )
    launched = []
    monkeypatch.setattr(config, "W2_EARLY_ROWS", rows)
    real = api.launch
    monkeypatch.setattr(
        api,
        "launch",
        lambda kernel, grid, args, ce, *a, **k: (
            launched.append((kernel, grid, ce)) or real(kernel, grid, args, ce, *a, **k)
        ),
    )
    with poison_outputs():
        out = api.forward(api.check_args(*pos, **kw), config=cfg)
    ((grid, ce),) = [(g, c) for k, g, c in launched if k is api._fused_moe_gemm2_kernel]
    assert ce["W_EARLY"] and ce["BLOCK_N"] == rows and ce["N_PAD"] == triton.next_power_of_2(inter)
    assert grid == (3 * pos[4].shape[1] * -(-200 // rows),)
    _check(out, inputs)


def test_gemm2_early_w2_only_on_16_bit_slot_calls_with_small_tiles(monkeypatch):
    monkeypatch.setattr(config, "W2_EARLY_ROWS", 16)
    assert config.w2_early_rows(768, False, True) == 16
    assert config.w2_early_rows(2048, False, True) == 16
    assert config.w2_early_rows(2049, False, True) == 0  # 16 x 4096 padded values: past the register budget
    assert config.w2_early_rows(768, True, True) == 0 and config.w2_early_rows(768, False, False) == 0
    assert config.w2_early_rows(768, False, True, swap_ab=1) == 0  # a hand-written config's swapped tile stays
    monkeypatch.setattr(config, "W2_EARLY_ROWS", 0)
    assert config.w2_early_rows(768, False, True) == 0


def test_slot_blocks_sum_only_local_experts():
    # ids out of range and experts elsewhere add nothing; a token with none of this rank's experts gets zeros
    inputs = _inputs(num_tokens=4, topk=3, local=3)
    ids = inputs["topk_ids"].clone()
    ids[1, :] = torch.tensor([-1, 8, 1 << 30])
    ids[2, 1] = -(1 << 30)
    inputs["topk_ids"] = ids
    pos, kw = _args(inputs)
    cfg = dataclasses.replace(config.fused_moe_config(4, 3, 80, 96, 3, "bfloat16", "none", None), slots=1)
    with poison_outputs():
        out = api.forward(api.check_args(*pos, **kw), config=cfg)
    assert (out[1] == 0).all()
    _check(out, inputs)


def test_slots_config_round_trip_and_check():
    g = config.GemmConfig(16, 64, 128, 1, 4, 4)
    cfg = config.FusedMoeConfig(g, g, slots=1)
    assert config.FusedMoeConfig.from_dict(json.loads(json.dumps(cfg.as_dict()))) == cfg
    assert "slots" not in config.FusedMoeConfig(g, g).as_dict()  # tables written before the field stay the same
    with pytest.raises(ValueError, match=r"^config\.slots"):
        config.validate(config.FusedMoeConfig(g, g, slots=2), "none")


def test_descriptors_only_where_tma_can_address():
    w = torch.empty(4, 64, 200, dtype=torch.float8_e4m3fn)
    assert not api._tma_ok(w)  # 200-byte rows: not a multiple of 16
    assert api._tma_ok(torch.empty(4, 64, 256, dtype=torch.float8_e4m3fn))
    assert not api._tma_ok(torch.empty(4, 256, 64, dtype=torch.bfloat16).transpose(1, 2))


def test_fp8_decode_tiles_swap_operands():
    # Hopper's fp8 MMA is wgmma only: a 16-row fp8 tile swaps A and B; bf16 and 64-row tiles do not
    for q in ("fp8_block128", "fp8_channel"):
        c = config.default_config(1, 256, 2048, 7168, 8, q)
        assert c.gemm1.swap_ab == c.gemm2.swap_ab == 1
    assert config.default_config(1, 128, 768, 2048, 8, "none").gemm1.swap_ab == 0
    assert config.default_config(4096, 256, 2048, 7168, 8, "fp8_block128").gemm1.swap_ab == 0
    # tables written before the field existed still load
    g = config.GemmConfig.from_dict(
        {"block_m": 16, "block_n": 64, "block_k": 128, "group_m": 1, "num_warps": 4, "num_stages": 4}
    )
    assert g.swap_ab == 0


def test_config_table_lookup(tmp_path):
    g = config.GemmConfig(16, 64, 128, 1, 4, 4)
    entries = {
        str(b): config.FusedMoeConfig(dataclasses.replace(g, block_m=bm), dataclasses.replace(g, block_m=bm)).as_dict()
        for b, bm in ((1, 16), (64, 32), (4096, 128))
    }
    table = {
        "op": "fused_moe",
        "format": 1,
        "key": {
            "E": 8,
            "N": 80,
            "K": 96,
            "dtype": "bfloat16",
            "quant": "fp8_block128",
            "device": "GPU X",
            "triton": "9.9.9",
        },
        "buckets": [1, 64, 4096],
        "configs": entries,
    }
    name = config.fused_moe_table_name(8, 80, 96, "bfloat16", "fp8_block128", "GPU X", "9.9.9")
    (tmp_path / name).write_text(json.dumps(table))

    def bm(m, device="GPU X"):
        c = config.lookup(m, 8, 80, 96, "bfloat16", "fp8_block128", device, config_dir=str(tmp_path))
        return None if c is None else c.block_size

    # nearest in log2: 7 is nearer 1 than 64 (2.8 vs 3.2); 8 and 512 tie (3 and 3) -> the larger
    assert [bm(1), bm(7), bm(8), bm(64), bm(511), bm(512), bm(100000)] == [16, 16, 32, 32, 32, 128, 128]
    assert bm(1, device="other") is None
    assert config.lookup(1, 8, 80, 96, "float16", "fp8_block128", "GPU X", config_dir=str(tmp_path)) is None


def test_default_rule_decode_and_prefill():
    small = config.default_config(4, 256, 2048, 7168, 8, "fp8_block128")
    large = config.default_config(8192, 256, 2048, 7168, 8, "fp8_block128")
    assert small.block_size == 16 and small.gemm1.block_n == 128
    # block-wise fp8 prefill: 64-row tiles, GEMM1 as two 64-column tiles a program at 4 warps (one 128-column tile
    # spills at 4 warps: test_fused_moe_resources)
    assert large.block_size == 64 and (large.gemm1.block_n, large.gemm1.num_warps, large.gemm2.num_warps) == (64, 4, 4)
    for m in (1, 16, 64, 65, 1024, 65536):
        for q in config.QUANT_SCHEMES:
            config.validate(config.default_config(m, 128, 768, 2048, 8, q), q)
    # decode narrows 16-bit GEMM1's columns until there are three programs per SM (Qwen3-30B's N 768, 128 experts:
    # M=4 touches 32 of them, 384 programs at 64 columns; Mixtral at M=1 has 448), fp8's until two
    assert config.default_config(1, 128, 768, 2048, 8, "none").gemm1.block_n == 32
    assert config.default_config(4, 128, 768, 2048, 8, "none").gemm1.block_n == 32
    assert config.default_config(8, 128, 768, 2048, 8, "none").gemm1.block_n == 64
    assert config.default_config(1, 8, 14336, 4096, 2, "none").gemm1.block_n == 64
    assert config.default_config(4, 8, 14336, 4096, 2, "fp8_channel").gemm1.block_n == 128
    # tiles follow the rows per expert (M * topk / E), not M: Mixtral at M=64 has 16 per expert, Qwen3-30B 4
    assert config.default_config(64, 8, 14336, 4096, 2, "none").block_size == 64
    assert config.default_config(64, 128, 768, 2048, 8, "none").block_size == 16
    big = config.default_config(16384, 8, 14336, 4096, 2, "none")
    assert (big.block_size, big.gemm1.block_n, big.gemm2.block_n, big.gemm2.num_warps) == (128, 128, 256, 8)


def test_shipped_tables_load():
    config._tables.cache_clear()
    tables = config._tables(str(config.CONFIG_DIR))
    assert tables, "no tuned table ships in the package"
    for (*_, quant, _device), versions in tables.items():
        for buckets, cfgs in versions.values():
            assert buckets and set(buckets) <= set(cfgs)
            for cfg in cfgs.values():
                config.validate(cfg, quant)


@pytest.mark.parametrize(
    "E,N,K,topk,quant", [(8, 14336, 4096, 2, "none"), (128, 768, 2048, 8, "none"), (256, 2048, 7168, 8, "fp8_block128")]
)
def test_shipped_h200_tables_reach_the_call(E, N, K, topk, quant):
    # the three MoE models' layers on an H200 take the tuned bucket nearest M (read here from the file itself);
    # another card keeps the default rule
    config.fused_moe_config.cache_clear()
    (path,) = config.CONFIG_DIR.glob(f"E={E},N={N},K={K},dtype=bfloat16,quant={quant},device=NVIDIA_H200,*.json")
    cfgs = json.loads(path.read_text())["configs"]
    for M, bucket in ((1, 1), (3, 4), (48, 64), (16384, 16384), (65536, 16384)):
        want = config.FusedMoeConfig.from_dict(cfgs[str(bucket)])
        assert config.fused_moe_config(M, E, N, K, topk, "bfloat16", quant, "NVIDIA H200") == want
        other = config.fused_moe_config(M, E, N, K, topk, "bfloat16", quant, "NVIDIA H100 80GB HBM3")
        assert other == config.default_config(M, E, N, K, topk, quant)


def test_table_archive_matches_the_package():
    # benchmarks/results keeps the tables under a plain file name (theirs hold '=' and ','): the same bytes
    import tarfile
    from pathlib import Path

    archives = sorted((Path(__file__).parents[2] / "benchmarks" / "results").glob("*/fused_moe_tables_*.tgz"))
    assert archives
    shipped = {p.name: p.read_bytes() for p in config.CONFIG_DIR.glob("*.json")}
    for path in archives:
        with tarfile.open(path) as tar:
            members = {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        device = path.name.split("_")[3]  # fused_moe_tables_<device>_triton<version>.tgz
        assert members == {n: b for n, b in shipped.items() if f"device=NVIDIA_{device.upper()}," in n}, path


def test_work_counts_distinct_experts():
    shape = spec_mod.Shape(num_tokens=1, hidden=7168, inter=2048, experts=256, topk=8, quant="fp8_block128")
    w = SPEC.work(shape, torch.bfloat16)
    assert w.flops == 2 * 8 * 3 * 2048 * 7168
    per_expert = 3 * 2048 * 7168
    assert 8 * per_expert < w.bytes < 8.1 * per_expert
    assert spec_mod.expected_experts(10**6, 256, 8) == pytest.approx(256)


def _bad_cases():
    def base(**kw):
        d = _inputs(**kw)
        pos, opt = _args(d)
        return dict(zip(("hidden_states", "w1", "w2", "topk_weights", "topk_ids"), pos)) | opt

    def fp8(quant="fp8_channel"):
        return base(quant=quant)

    def with_(d, **kw):
        d = dict(d)
        d.update(kw)
        return d

    b = base()
    f = fp8()
    fb = fp8("fp8_block128")
    x, w1, w2, tw, ti = (b[k] for k in ("hidden_states", "w1", "w2", "topk_weights", "topk_ids"))
    return [
        ("x-rank", with_(b, hidden_states=x[None]), ValueError, "hidden_states"),
        ("x-fp32", with_(b, hidden_states=x.float()), TypeError, "hidden_states"),
        ("w1-rank", with_(b, w1=w1[0]), ValueError, "w1"),
        ("w1-K", with_(b, w1=w1[:, :, :64]), ValueError, "w1"),
        ("w1-dtype", with_(b, w1=w1.half()), TypeError, "w1"),
        # no expert: the config's tokens-per-expert divided by zero
        ("w1-no-experts", with_(b, w1=w1[:0], w2=w2[:0]), ValueError, "w1 must hold at least one expert"),
        ("w2-N", with_(b, w2=w2[:, :, :64]), ValueError, "w2"),
        ("w2-K", with_(b, w2=w2[:, :64]), ValueError, "w2"),
        ("w2-E", with_(b, w2=w2[:4]), ValueError, "w2"),
        ("w2-dtype", with_(b, w2=w2.half()), TypeError, "w2"),
        ("weights-shape", with_(b, topk_weights=tw[:, :1]), ValueError, "topk_weights"),
        ("weights-dtype", with_(b, topk_weights=tw.double()), TypeError, "topk_weights"),
        ("ids-M", with_(b, topk_ids=ti[:4]), ValueError, "topk_ids"),
        ("ids-dtype", with_(b, topk_ids=ti.float()), TypeError, "topk_ids"),
        ("ids-strided", with_(b, topk_ids=ti.t().contiguous().t()), ValueError, "topk_ids"),
        ("activation", with_(b, activation="relu"), ValueError, "activation"),
        ("routed-topk2", with_(b, apply_router_weight_on_input=True), ValueError, "apply_router_weight_on_input"),
        ("map-dtype", with_(b, expert_map=torch.arange(8, device=DEVICE)), TypeError, "expert_map"),
        ("scale-on-bf16", with_(b, w1_scale=f["w1_scale"]), ValueError, "w1_scale"),
        ("no-scale", with_(f, w1_scale=None), ValueError, "w1_scale"),
        ("scale-shape", with_(f, w1_scale=f["w1_scale"][:, :7]), ValueError, "w1_scale"),
        ("scale-dtype", with_(f, w2_scale=f["w2_scale"].half()), TypeError, "w2_scale"),
        ("scheme-mismatch", with_(f, w2_scale=f["w2_scale"].amax(dim=(1, 2))), ValueError, "w2_scale"),
        ("block-scale-shape", with_(fb, w1_scale=fb["w1_scale"][:, :1]), ValueError, "w1_scale"),
        ("block-shape", with_(fb, block_shape=[64, 64]), ValueError, "block_shape"),
        ("static-with-block", with_(fb, a1_scale=torch.ones(1, device=DEVICE)), ValueError, "a1_scale"),
        ("static-numel", with_(f, a2_scale=torch.ones(2, device=DEVICE)), ValueError, "a2_scale"),
        ("out-shape", with_(b, out=torch.zeros(9, 95, dtype=x.dtype, device=DEVICE)), ValueError, "out"),
        ("out-dtype", with_(b, out=torch.zeros(9, 96, dtype=torch.float16, device=DEVICE)), TypeError, "out"),
        ("per-token-int", with_(f, per_act_token_quant=0), TypeError, "per_act_token_quant"),
        ("per-tensor-block", with_(fb, per_act_token_quant=False), ValueError, "per_act_token_quant"),
    ]


BAD = _bad_cases()
_POS = ("hidden_states", "w1", "w2", "topk_weights", "topk_ids")


@pytest.mark.parametrize("kw,exc,name", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input(kw, exc, name):
    out = kw.get("out")
    if out is None:
        out = torch.full((9, 96), 3.0, dtype=torch.bfloat16, device=DEVICE)
        if kw["hidden_states"].dtype == torch.bfloat16 and kw["hidden_states"].dim() == 2:
            kw = dict(kw, out=out)
    before = out.clone()
    with pytest.raises(exc, match=rf"^{name}"):
        fused_moe(*(kw[k] for k in _POS), **{k: v for k, v in kw.items() if k not in _POS})
    assert torch.equal(out, before)


def _captured_targets(fn, *args):
    targets = []

    def backend(gm, example_inputs):
        targets.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    return torch.compile(fn, backend=backend, fullgraph=True)(*args), targets


def test_torch_compile_records_one_custom_op():
    inputs = _inputs(quant="fp8_block128", hidden=200, inter=160)
    pos, kw = _args(inputs)
    got, targets = _captured_targets(lambda *a: fused_moe(*a, **kw) * 2, *pos)
    assert "tritonkit.fused_moe" in targets
    torch.testing.assert_close(got, fused_moe(*pos, **kw) * 2, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.gpu_alone  # 256 experts of DeepSeek-V3 width
@pytest.mark.parametrize("quant", ["none", "fp8_channel", "fp8_block128"])
def test_deepseek_width_on_gpu(quant):
    # K 7168, N 2048 (DeepSeek-V3's expert), 16 experts: the long K loops (fp8 per-K-tile promotion) at real width
    shape = spec_mod.Shape(num_tokens=300, hidden=7168, inter=2048, experts=16, topk=4, quant=quant)
    assert_valid(SPEC, shape, torch.bfloat16, "randn", device=DEVICE)


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
@pytest.mark.parametrize("quant", ["none", "fp8_block128"])
@pytest.mark.parametrize("num_tokens", [1, 2])
def test_slot_blocks_replay_in_a_cuda_graph(quant, num_tokens, pdl, monkeypatch):
    # the counters GEMM1 zeroes and GEMM2's last programs count on are reused by every replay: each replay with new
    # ids and activations must equal an eager call of the sorted layout, bit for bit, with programs running at once;
    # with GEMM2 as GEMM1's programmatic dependent (config.SLOTS_PDL) too, whose edge the graph keeps
    monkeypatch.setattr(config, "SLOTS_PDL", pdl)
    inputs = _inputs(num_tokens=num_tokens, quant=quant, hidden=2048, inter=768, experts=64, topk=8)
    pos, kw = _args(inputs)
    cfg = config.fused_moe_config(num_tokens, 64, 768, 2048, 8, "bfloat16", quant, torch.cuda.get_device_name())
    assert cfg.slots == 1
    sorted_cfg = dataclasses.replace(cfg, slots=0)
    x, ids, wts = (t.clone() for t in (pos[0], pos[4], pos[3]))
    static = (x, pos[1], pos[2], wts, ids)
    api.forward(api.check_args(*static, **kw), config=cfg)  # compile outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = api.forward(api.check_args(*static, **kw), config=cfg)
    gen = torch.Generator(device="cuda").manual_seed(3)
    for _ in range(3):
        x.copy_(torch.randn(x.shape, generator=gen, device="cuda", dtype=x.dtype))
        ids.copy_(torch.stack([torch.randperm(64, generator=gen, device="cuda")[:8] for _ in range(num_tokens)]))
        g.replay()
        want = api.forward(api.check_args(*static, **kw), config=sorted_cfg)
        torch.cuda.synchronize()
        assert torch.equal(captured, want)


@pytest.mark.parametrize("inter, want", [(768, True), (4096, True), (4097, False), (14336, False)])
def test_gemm2_is_a_dependent_only_where_its_programs_are_light(inter, want, monkeypatch):
    # config.slots_pdl: on a card with PDL, a slot call's GEMM2 launches as GEMM1's dependent where each GEMM2 program
    # streams at most SLOTS_PDL_MAX_PROGRAM_BYTES of w2 (block_n rows of `inter` bf16 values: 256 KB at 32 x 4096);
    # Mixtral's 896 KB programs stay plain. The sorted layout never chains; TRITONKIT_MOE_SLOTS_PDL forces either way
    monkeypatch.setattr(config, "SLOTS_PDL", None)
    monkeypatch.setattr(api._device, "pdl", lambda device: True)
    inputs = _inputs(num_tokens=1, hidden=64, inter=inter, experts=4, topk=2)
    pos, kw = _args(inputs)
    g = config.GemmConfig(block_m=16, block_n=32, block_k=64, group_m=1, num_warps=4, num_stages=2)
    a = api.check_args(*pos, **kw)
    out = torch.empty_like(pos[0])

    def pdl_flags(cfg):
        return [step.pdl for step in api._steps(a, cfg, out)]

    flags = pdl_flags(config.FusedMoeConfig(g, g, slots=1))
    assert flags[-1] is want and not any(flags[:-1])
    assert not any(pdl_flags(config.FusedMoeConfig(g, g, slots=0)))
    monkeypatch.setattr(config, "SLOTS_PDL", not want)
    assert pdl_flags(config.FusedMoeConfig(g, g, slots=1))[-1] is (not want)


def test_ids_are_checked_on_request(monkeypatch):
    # TRITONKIT_CHECK_INDICES=1: a bad id or map entry is an error naming it and where, before anything is written
    inputs = _inputs(num_tokens=6, topk=3)
    inputs["topk_ids"] = inputs["topk_ids"].clone()
    inputs["topk_ids"][4, 2] = 8
    pos, kw = _args(inputs)
    out = torch.full((6, 96), 3.0, dtype=torch.bfloat16, device=DEVICE)
    monkeypatch.setenv("TRITONKIT_CHECK_INDICES", "1")
    with pytest.raises(ValueError, match=r"^topk_ids must hold expert ids in \[0, 8\), got 8 at \(4, 2\)"):
        fused_moe(*pos, **kw, out=out)
    assert (out == 3).all()
    mapped = _inputs(num_tokens=6, topk=3, local=3)
    mapped["expert_map"] = mapped["expert_map"].clone()
    mapped["expert_map"][5] = 3  # only 3 local experts: 0, 1, 2
    pos, kw = _args(mapped)
    with pytest.raises(
        ValueError, match=r"^expert_map must hold local expert indices .* in \[-1, 3\), got 3 at \(5,\)"
    ):
        fused_moe(*pos, **kw)
    # unset, the same call drops the slot (no host sync)
    monkeypatch.delenv("TRITONKIT_CHECK_INDICES")
    pos, kw = _args(inputs)
    _check(fused_moe(*pos, **kw), inputs)


def test_the_id_check_stays_out_of_a_compiled_graph(monkeypatch):
    # torch.compile traces the call: nothing to read, no graph break (fullgraph), the op still recorded
    monkeypatch.setenv("TRITONKIT_CHECK_INDICES", "1")
    inputs = _inputs()
    pos, kw = _args(inputs)
    got, targets = _captured_targets(lambda *a: fused_moe(*a, **kw), *pos)
    assert "tritonkit.fused_moe" in targets
    _check(got, inputs)


@pytest.mark.parametrize("cols", [200, 1024, 1100, 2176])
def test_group_quantization_spans_programs(cols):
    # 8 groups of one row per program along grid axis 1: a partial last program, a partial last group
    x = Fill("outlier", DEVICE, 5)((3, cols), torch.bfloat16)
    q, s, stride_row, stride_col = api.quantize_fp8(x, "group", None)
    groups = -(-cols // 128)
    assert s.shape == (3, groups) and (stride_row, stride_col) == (groups, 1)
    deq = q.float() * s.repeat_interleave(128, dim=1)[:, :cols]
    assert torch.equal(deq, ref_mod.quantize_fp8(x.float(), "group"))  # the op's float32 arithmetic, exactly
