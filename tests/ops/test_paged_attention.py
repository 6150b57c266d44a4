import dataclasses
import os

import pytest
import torch
from conftest import DEVICE

from tritonkit.ops import get_spec, paged_attention
from tritonkit.ops.paged_attention import config
from tritonkit.ops.paged_attention.reference import paged_attention_reference
from tritonkit.spec import Shape
from tritonkit.testing import Fill, assert_valid
from tritonkit.testing.metric import compare
from tritonkit.spec import upcast


SPEC = get_spec("paged_attention")
BOUNDARY = SPEC.boundary


def _ids(shapes):
    return [s.id for s in shapes]


@pytest.mark.parametrize("shape", BOUNDARY, ids=_ids(BOUNDARY))
def test_boundary_bf16_randn(shape):
    assert_valid(SPEC, shape, torch.bfloat16, "randn")


@pytest.mark.parametrize("shape", BOUNDARY, ids=_ids(BOUNDARY))
def test_boundary_fp16_large_logits(shape):
    assert_valid(SPEC, shape, torch.float16, "near_max")


# all-equal logits: the softmax denominator is everything; cover splits, windows, sinks and both paths
_CONSTANT = [
    s
    for s in BOUNDARY
    if s["num_seqs"] == 1 or s.get("sinks") or s.get("window_left", -1) >= 0 or s.get("kv_dtype") == "fp8"
]


@pytest.mark.parametrize("shape", _CONSTANT, ids=_ids(_CONSTANT))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_boundary_all_equal_logits(shape, dtype):
    assert_valid(SPEC, shape, dtype, "constant")


def test_the_decode_stages_switch_reaches_the_launch_plan():
    """TRITONKIT_DECODE_STAGES (config.DECODE_STAGES: 0, the rule, by default; 3 or 4 for every decode launch) is the
    decode launch's num_stages, through overrides (the plan is memoized)."""
    from tritonkit.ops import overrides

    def stages(num_seqs):
        return config.launch_plan(4, 128, 2, num_seqs, num_seqs, 8, 1, 8192, 132, False, True).decode.num_stages

    if os.environ.get("TRITONKIT_DECODE_STAGES", "").strip():
        pytest.skip("TRITONKIT_DECODE_STAGES is set: the default is not in force")
    assert config.DECODE_STAGES == 0
    with overrides(config, DECODE_STAGES=4):
        assert stages(4) == 4 and stages(128) == 4
    with overrides(config, DECODE_STAGES=3, DECODE_STAGES_RELEASE=True):
        assert stages(128) == 3


def test_decode_takes_four_stages_past_one_wave_from_triton_3_7():
    """The rule (config.decode_stages): 4 stages only for the narrow bf16/fp16 program at head_dim 128 on sm_90 when
    the grid holds more than DECODE_PROGRAMS_PER_SM_LONG programs a SM, and only under 3.7 and later; 3 everywhere
    else."""
    from tritonkit.ops import overrides

    assert not config.decode_stages_release("3.6.0")
    assert config.decode_stages_release("3.7.1") and config.decode_stages_release("3.9.0")
    one_wave = config.DECODE_PROGRAMS_PER_SM_LONG * 132
    with overrides(config, DECODE_STAGES_RELEASE=True):
        assert config.decode_stages(128, 2, False, one_wave, 132, sm90=True) == 3
        assert config.decode_stages(128, 2, False, one_wave + 1, 132, sm90=True) == 4
        assert config.decode_stages(96, 2, False, one_wave + 1, 132, sm90=True) == 4  # padded to 128
        assert config.decode_stages(256, 2, False, one_wave + 1, 132, sm90=True) == 3
        assert config.decode_stages(64, 2, False, one_wave + 1, 132, sm90=True) == 3
        assert config.decode_stages(128, 1, False, one_wave + 1, 132, sm90=True) == 3
        assert config.decode_stages(128, 2, True, one_wave + 1, 132, sm90=True) == 3
        # through the plan: batch 128 of 8 KV heads is 1024 programs of one split over 132 SMs; batch 4 splits
        plan = config.launch_plan(4, 128, 2, 128, 128, 8, 1, 8192, 132, False, True).decode
        assert (plan.num_splits, plan.num_stages) == (1, 4)
        assert config.launch_plan(4, 128, 2, 4, 4, 8, 1, 8192, 132, False, True).decode.num_stages == 3
        # another GPU than sm_90: its shared memory and registers were not what the rule was read on
        assert config.launch_plan(4, 128, 2, 128, 128, 8, 1, 8192, 132, False, False).decode.num_stages == 3
        assert config.decode_stages(128, 2, False, one_wave + 1, 132, sm90=False) == 3
    with overrides(config, DECODE_STAGES_RELEASE=False):
        assert config.decode_stages(128, 2, False, one_wave + 1, 132, sm90=True) == 3
        assert config.launch_plan(4, 128, 2, 128, 128, 8, 1, 8192, 132, False, True).decode.num_stages == 3


def test_boundary_covers_both_paths_and_the_split_merge():
    """The boundary list must keep exercising what the heuristics route: decode with several KV splits, prefill,
    and batches that mix them, and the prefill kernel's KV splits."""
    splits, prefill, mixed, prefill_splits = False, False, False, False
    for s in BOUNDARY:
        group = s["num_heads"] // s["num_kv_heads"]
        q_lens = s["q_len"] if isinstance(s["q_len"], tuple) else (s["q_len"],) * s["num_seqs"]
        ctx = s["context"] if isinstance(s["context"], tuple) else (s["context"],) * s["num_seqs"]
        max_q = config.decode_max_q(group)
        kv_bytes = 1 if s.get("kv_dtype") == "fp8" else 2
        n = config.num_kv_splits(
            s["num_seqs"], s["num_kv_heads"], max(c + q for c, q in zip(ctx, q_lens)), config.DEFAULT_NUM_SMS, kv_bytes
        )
        splits |= n > 1 and min(q_lens) <= max_q
        prefill |= max(q_lens) > max_q
        mixed |= max(q_lens) > max_q and 0 < min(q_lens) <= max_q
        pre = config.prefill_config(
            group,
            s["head_dim"],
            kv_bytes,
            s["num_seqs"],
            sum(q_lens),
            max(q_lens),
            s["num_kv_heads"],
            max(c + q for c, q in zip(ctx, q_lens)),
        )
        prefill_splits |= max(q_lens) > config.decode_max_q(group) and pre.num_splits > 1
    assert splits and prefill and mixed and prefill_splits


def _inputs(shape, dtype=torch.bfloat16, family="randn", seed=0):
    return SPEC.make_inputs(shape, dtype, Fill(family, DEVICE, seed))


def _kwargs(inp):
    keys = (
        "cu_seqlens_q",
        "seqused_k",
        "block_table",
        "max_seqlen_q",
        "max_seqlen_k",
        "causal",
        "window_size",
        "softcap",
        "sinks",
        "k_scale",
        "v_scale",
    )
    return {k: inp[k] for k in keys if k in inp}


def _assert_matches(out, inp, rows=slice(None)):
    """out[rows] against the float64 reference under the spec's tolerance and error scale."""
    ref_in = upcast(inp)
    ref = SPEC.reference(ref_in, inp["q"].dtype)["out"][rows]
    c = compare(out[rows], ref, SPEC.tolerance_for(inp["q"].dtype), SPEC.error_scale(ref_in)["out"][rows])
    assert c.passed, c.describe()


# a prefill sequence longer than the wide decode rows take (64 tokens at group 2) between two decode sequences
MIXED = Shape(
    num_seqs=3, q_len=(1, 70, 2), context=(40, 5, 17), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16
)


def test_out_is_written_in_place_and_graph_padding_is_left_alone():
    inp = _inputs(MIXED)
    q = inp["q"]
    # two padding tokens past cu_seqlens_q[-1], as a CUDA-graph batch padded to a captured size has
    q_pad = torch.cat([q, torch.randn(2, *q.shape[1:], device=DEVICE).to(q.dtype)])
    out = torch.full_like(q_pad, 7.0)
    res = paged_attention(q_pad, inp["k_cache"], inp["v_cache"], out=out, **_kwargs(inp))
    assert res is out
    _assert_matches(out[:-2], inp)
    assert bool((out[-2:] == 7.0).all())


# decode sequences 0 and 2 (the second with several KV splits: 600 keys), a prefill sequence between them
MIXED_SPLIT = Shape(
    num_seqs=3, q_len=(1, 70, 2), context=(40, 5, 600), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16
)


@pytest.mark.parametrize("shape, splits", [(MIXED, 1), (MIXED_SPLIT, 2)], ids=["one-split", "split"])
@pytest.mark.parametrize("path", ["decode", "prefill"])
def test_each_path_writes_only_its_own_sequences(monkeypatch, path, shape, splits):
    """The decode kernel's programs for a prefill sequence (and the prefill kernel's for a decode sequence, or past
    a sequence's last query tile) run no tile and store nothing: with the other path's launches dropped, its rows
    keep what out held, and this path's rows are right (the decode kernel writes out itself with one split, through
    the merge with several)."""
    from tritonkit.ops.paged_attention import api

    inp = _inputs(shape)
    group = shape["num_heads"] // shape["num_kv_heads"]
    if splits == 1:
        # the prompt takes 75 keys, two splits from 32 keys a split: one split needs a higher threshold
        monkeypatch.setattr(config, "MIN_KEYS_PER_SPLIT", 128)
    n = config.num_kv_splits(3, shape["num_kv_heads"], inp["max_seqlen_k"], config.num_sms(inp["q"].device))
    assert (n > 1) == (splits > 1)
    other = (
        {api._paged_attention_prefill_kernel}
        if path == "decode"
        else {api._paged_attention_decode_kernel, api._paged_attention_merge_kernel}
    )
    real = api.launch
    launched = []

    def launch(kernel, *a, **k):
        launched.append(kernel)
        if kernel not in other:
            real(kernel, *a, **k)

    monkeypatch.setattr(api, "launch", launch)
    out = torch.full_like(inp["q"], 7.0)
    paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], out=out, **_kwargs(inp))
    # the other path did launch (with one split there is no merge)
    assert (api._paged_attention_prefill_kernel if path == "decode" else api._paged_attention_decode_kernel) in launched
    cu = inp["cu_seqlens_q"].tolist()
    for s in range(3):
        rows = slice(cu[s], cu[s + 1])
        mine = (cu[s + 1] - cu[s] <= config.decode_max_q(group)) == (path == "decode")
        if mine:
            _assert_matches(out, inp, rows)
        else:
            assert bool((out[rows] == 7.0).all()), f"the {path} path wrote sequence {s}'s rows"


def test_rows_before_the_first_sequence_are_left_alone():
    # cu_seqlens_q[0] past a whole query tile: the prefill grid's first programs own no tile (t0 < 0) and must not
    # store into the rows before the first sequence
    shape = Shape(num_seqs=2, q_len=(20, 1), context=(5, 30), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16)
    inp = _inputs(shape)
    pad = config.prefill_config(2, 64, 2).block_q + 22
    q = torch.cat([torch.randn(pad, *inp["q"].shape[1:], device=DEVICE).to(inp["q"].dtype), inp["q"]])
    out = torch.full_like(q, 7.0)
    kw = _kwargs(inp) | {"cu_seqlens_q": inp["cu_seqlens_q"] + pad}
    paged_attention(q, inp["k_cache"], inp["v_cache"], out=out, **kw)
    assert bool((out[:pad] == 7.0).all()), "rows before cu_seqlens_q[0] were written"
    _assert_matches(out[pad:], inp)


def test_no_host_reads_of_tensor_data(monkeypatch):
    """The call must be CUDA-graph capturable: no .item()/.tolist()/bool() of a tensor on the host path."""
    inp = _inputs(MIXED)
    calls = []

    def forbid(name):
        orig = getattr(torch.Tensor, name)

        def wrapper(self, *a, **k):
            import traceback

            if any(
                "paged_attention/api.py" in f.filename or "paged_attention/config.py" in f.filename
                for f in traceback.extract_stack()[-4:-1]
            ):
                calls.append(name)
            return orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, wrapper)

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
        forbid(name)
    paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], **_kwargs(inp))
    assert not calls, f"host reads of tensor data: {calls}"


def test_torch_compile_aot_eager_matches_eager():
    inp = _inputs(MIXED)
    kw = _kwargs(inp)
    eager = paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], **kw)

    def f(q, k, v, out):
        a = paged_attention(q, k, v, **kw)
        paged_attention(q, k, v, out=out, **kw)
        return a

    out = torch.empty_like(inp["q"])
    got = torch.compile(f, backend="aot_eager", fullgraph=True)(inp["q"], inp["k_cache"], inp["v_cache"], out)
    torch.testing.assert_close(got, eager, rtol=0, atol=0)
    torch.testing.assert_close(out, eager, rtol=0, atol=0)


def test_float_and_tensor_fp8_scales_agree():
    inp = _inputs(BOUNDARY[-1])
    kw = _kwargs(inp)
    by_tensor = paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], **kw)
    kw["k_scale"], kw["v_scale"] = float(inp["k_scale"]), float(inp["v_scale"])
    by_float = paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], **kw)
    torch.testing.assert_close(by_float, by_tensor, rtol=0, atol=0)


@pytest.mark.parametrize("joint_kv", [0, 1])
def test_the_sampled_oracle_equals_the_whole_one_on_its_rows(monkeypatch, joint_kv):
    """Past ORACLE_BYTES the oracle covers a sample of whole sequences over a cache of the pages they name: on its
    rows it must give what the whole oracle gives (mixed lengths, a window, sinks, the spare page's column)."""
    from tritonkit.ops.paged_attention import spec as S

    shape = Shape(
        num_seqs=7,
        q_len=(1, 5, 17, 1, 3, 32, 2),
        context=(40, 0, 15, 63, 7, 1, 33),
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        block_size=16,
        window_left=20,
        sinks=1,
        joint_kv=joint_kv,
    )
    inp = SPEC.make_inputs(shape, torch.float32, Fill("randn", "cpu", 5))
    whole, none = S.oracle_inputs(inp)
    assert none == {}  # small: every row, the inputs upcast whole
    assert whole["k_cache"].shape == inp["k_cache"].shape and whole["q"].dtype == torch.float64
    full = SPEC.reference(whole, torch.float32)["out"]
    monkeypatch.setattr(S, "ORACLE_BYTES", 0)
    monkeypatch.setattr(S, "ORACLE_SEQS", 3)
    sample, rows = S.oracle_inputs(inp)
    cu = inp["cu_seqlens_q"].tolist()
    # the first, middle and last sequences, whole
    want = [i for s in (0, 3, 6) for i in range(cu[s], cu[s + 1])]
    assert rows["out"].tolist() == want
    assert sample["k_cache"].shape[0] < inp["k_cache"].shape[0]
    assert sample["max_seqlen_q"] == 2 and sample["max_seqlen_k"] == 64
    got = SPEC.reference(sample, torch.float32)["out"]
    torch.testing.assert_close(got, full[rows["out"]], rtol=1e-12, atol=1e-12)
    # the caller's inputs are untouched
    assert inp["q"].dtype == torch.float32 and inp["block_table"].shape[0] == 7


def test_validate_checks_a_sampled_case_and_finds_a_wrong_row(monkeypatch):
    from tritonkit.ops.paged_attention import spec as S
    from tritonkit.testing.validate import validate_case

    monkeypatch.setattr(S, "ORACLE_BYTES", 0)
    monkeypatch.setattr(S, "ORACLE_SEQS", 2)
    shape = Shape(
        num_seqs=3, q_len=(2, 1, 3), context=(5, 17, 0), num_heads=2, num_kv_heads=1, head_dim=16, block_size=16
    )
    assert validate_case(SPEC, shape, torch.bfloat16, "randn", device=DEVICE).passed
    # a wrong value in the last sequence (a sampled one) fails the case
    real = SPEC.call

    def off_by_one(inputs):
        out = real(inputs)
        out["out"][-1] += 1.0
        return out

    res = validate_case(dataclasses.replace(SPEC, call=off_by_one), shape, torch.bfloat16, "randn", device=DEVICE)
    assert not res.passed and res.outputs["out"]["mismatches"] > 0


def test_reference_matches_sdpa_on_a_dense_causal_batch():
    """The oracle itself, against torch SDPA: identity page table, no context (bottom-right == top-left), GQA."""
    shape = Shape(num_seqs=2, q_len=(16, 16), context=0, num_heads=4, num_kv_heads=2, head_dim=32, block_size=16)
    inp = SPEC.make_inputs(shape, torch.float32, Fill("randn", "cpu", 3))
    ref = paged_attention_reference(
        inp["q"].double(),
        inp["k_cache"].double(),
        inp["v_cache"].double(),
        **{k: inp[k] for k in ("cu_seqlens_q", "seqused_k", "block_table")},
    )
    for s in range(2):
        pages = inp["block_table"][s, :1].long()
        k = inp["k_cache"][pages].reshape(16, 2, 32).double().transpose(0, 1).repeat_interleave(2, 0)
        v = inp["v_cache"][pages].reshape(16, 2, 32).double().transpose(0, 1).repeat_interleave(2, 0)
        q = inp["q"][16 * s : 16 * (s + 1)].double().transpose(0, 1)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1)
        torch.testing.assert_close(ref[16 * s : 16 * (s + 1)], want)


def test_work_model_counts_the_causal_half():
    shape = Shape(num_seqs=1, q_len=8, context=0, num_heads=2, num_kv_heads=1, head_dim=16, block_size=16)
    w = SPEC.work(shape, torch.bfloat16)
    assert w.flops == 4 * (8 * 9 // 2) * 16 * 2
    assert w.bytes == 2 * 8 * 1 * 16 * 2 + 2 * 8 * 2 * 16 * 2


# a window side near 2^31 is no limit: the kernels' position sums (position + side + 1) stayed in int32 and wrapped,
# so every row saw no key; the second sequence holds fewer keys than queries (positions below 0) for the left side
_HUGE = 2**31 - 1


@pytest.mark.parametrize(
    "window", [(-1, _HUGE), (_HUGE, -1), (_HUGE, _HUGE), (_HUGE - 1, _HUGE - 1)], ids=lambda w: f"{w[0]}_{w[1]}"
)
def test_a_window_side_near_2_31_is_no_limit(window):
    shape = Shape(
        num_seqs=3,
        q_len=(1, 20, 2),
        context=(40, 3, 17),
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        block_size=16,
        causal=0,
        window_left=window[0],
        window_right=window[1],
    )
    inp = _inputs(shape)
    inp["seqused_k"][1] = 5
    out = paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], **_kwargs(inp))
    _assert_matches(out, inp)
    unbounded = dict(inp, window_size=(-1, -1))
    torch.testing.assert_close(
        out, paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], **_kwargs(unbounded)), rtol=0, atol=0
    )


# --- bad input: a clear error naming the argument, and out untouched ---------------------------------------------

BAD = Shape(num_seqs=2, q_len=(1, 5), context=(20, 3), num_heads=4, num_kv_heads=2, head_dim=32, block_size=16)


def _bad_cases():
    def mod(**changes):
        return changes

    f32 = torch.float32
    return {
        "heads_not_multiple": (
            lambda i: mod(q=torch.zeros(i["q"].shape[0], 5, 32, dtype=i["q"].dtype)),
            ValueError,
            "num_kv_heads",
        ),
        "head_dim_mismatch": (
            lambda i: mod(q=torch.zeros(i["q"].shape[0], 4, 64, dtype=i["q"].dtype)),
            ValueError,
            "head_dim",
        ),
        "q_dtype": (lambda i: mod(q=i["q"].to(f32)), TypeError, "q must"),
        "k_cache_dtype": (lambda i: mod(k_cache=i["k_cache"].half()), TypeError, "k_cache"),
        "v_cache_dtype": (lambda i: mod(v_cache=i["v_cache"].half()), TypeError, "v_cache"),
        "v_cache_shape": (lambda i: mod(v_cache=i["v_cache"][:-1]), ValueError, "v_cache"),
        "device": (lambda i: mod(block_table=i["block_table"].to("meta")), ValueError, "block_table"),
        "cu_seqlens_len": (lambda i: mod(cu_seqlens_q=i["cu_seqlens_q"][:-1]), ValueError, "cu_seqlens_q"),
        "cu_seqlens_dtype": (lambda i: mod(cu_seqlens_q=i["cu_seqlens_q"].long()), TypeError, "cu_seqlens_q"),
        "seqused_k_dtype": (lambda i: mod(seqused_k=i["seqused_k"].long()), TypeError, "seqused_k"),
        "block_table_rows": (lambda i: mod(block_table=i["block_table"][:1]), ValueError, "block_table"),
        "block_table_narrow": (
            lambda i: mod(max_seqlen_k=i["block_table"].shape[1] * 16 + 1),
            ValueError,
            "block_table",
        ),
        "max_seqlen_q_type": (lambda i: mod(max_seqlen_q=5.0), TypeError, "max_seqlen_q"),
        "softmax_scale": (lambda i: mod(softmax_scale=0.0), ValueError, "softmax_scale"),
        "window_value": (lambda i: mod(window_size=(-2, 0)), ValueError, "window_size"),
        "window_type": (lambda i: mod(window_size=4), TypeError, "window_size"),
        "softcap": (lambda i: mod(softcap=-1.0), ValueError, "softcap"),
        "sinks_shape": (lambda i: mod(sinks=torch.zeros(3)), ValueError, "sinks"),
        # made on the device: a strided CPU tensor moved there would arrive contiguous
        "sinks_strided": (
            lambda i: mod(sinks=torch.zeros(4, 2, device=DEVICE)[:, 0]),
            ValueError,
            "sinks must be contiguous",
        ),
        "seqused_k_strided": (
            lambda i: mod(seqused_k=i["seqused_k"].repeat_interleave(2)[::2]),
            ValueError,
            "seqused_k must be contiguous",
        ),
        "cu_seqlens_strided": (
            lambda i: mod(cu_seqlens_q=i["cu_seqlens_q"].repeat_interleave(2)[::2]),
            ValueError,
            "cu_seqlens_q must be contiguous",
        ),
        "zero_heads": (
            lambda i: mod(q=torch.zeros(i["q"].shape[0], 0, 32, dtype=i["q"].dtype)),
            ValueError,
            "at least one head",
        ),
        "sinks_dtype": (lambda i: mod(sinks=torch.zeros(4, dtype=torch.bfloat16)), TypeError, "sinks"),
        "out_shape": (lambda i: mod(out=torch.full((6, 4, 16), 7.0, dtype=i["q"].dtype)), ValueError, "out"),
        "out_dtype": (lambda i: mod(out=torch.full((6, 4, 32), 7.0, dtype=torch.float16)), TypeError, "out"),
        "scale_without_fp8": (lambda i: mod(k_scale=1.0, v_scale=1.0), ValueError, "k_scale"),
        "fp8_without_scale": (
            lambda i: mod(k_cache=i["k_cache"].to(torch.float8_e4m3fn), v_cache=i["v_cache"].to(torch.float8_e4m3fn)),
            ValueError,
            "k_scale",
        ),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_input_names_the_argument_and_leaves_out_alone(case):
    inp = _inputs(BAD)
    make, exc, needle = _bad_cases()[case]
    args = {
        "q": inp["q"],
        "k_cache": inp["k_cache"],
        "v_cache": inp["v_cache"],
        **_kwargs(inp),
        "out": torch.full_like(inp["q"], 7.0),
    }
    for k, v in make(inp).items():
        args[k] = v.to(DEVICE) if isinstance(v, torch.Tensor) and v.device.type != "meta" else v
    out = args["out"]
    before = out.clone()
    with pytest.raises(exc, match=needle):
        paged_attention(args.pop("q"), args.pop("k_cache"), args.pop("v_cache"), **args)
    assert torch.equal(out, before)


# --- GPU only ----------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape",
    [
        Shape(num_seqs=2, q_len=1, context=32767, num_heads=32, num_kv_heads=8, head_dim=128, block_size=16),
        Shape(
            num_seqs=1,
            q_len=1,
            context=65535,
            num_heads=28,
            num_kv_heads=4,
            head_dim=128,
            block_size=16,
            sinks=1,
            softcap=30.0,
        ),
        # the float64 reference holds [heads, q_len, keys] scores: 1024 x 32K x 32 heads is 8.6 GB
        Shape(
            num_seqs=2,
            q_len=(1024, 1),
            context=(31744, 32767),
            num_heads=32,
            num_kv_heads=8,
            head_dim=128,
            block_size=16,
        ),
        Shape(
            num_seqs=1,
            q_len=1,
            context=40000,
            num_heads=32,
            num_kv_heads=8,
            head_dim=128,
            block_size=16,
            window_left=4095,
        ),
    ],
    ids=lambda s: s.id,
)
def test_long_context(shape):
    assert_valid(SPEC, shape, torch.bfloat16, "randn")


@pytest.mark.gpu
@pytest.mark.gpu_alone  # 21 GB of inputs and output, and their float32 making
def test_a_million_query_tokens():
    # 4096 causal prompts of 256 tokens, 2^20 query rows: the launch grid and the token offsets at that size
    from tritonkit.ops._alloc import poison_outputs

    shape = Shape(num_seqs=4096, q_len=256, context=0, num_heads=32, num_kv_heads=8, head_dim=128, block_size=16)
    # the float64 oracle covers 64 of the prompts, the last included (spec.ORACLE_BYTES)
    assert_valid(SPEC, shape, torch.bfloat16, "randn")
    # and every row of the other prompts is written: the output starts as NaN
    inputs = SPEC.make_inputs(shape, torch.bfloat16, Fill("randn", DEVICE, 0))
    with poison_outputs():
        out = SPEC.call(inputs)["out"]
    assert out.shape == inputs["q"].shape and not out.isnan().any()


@pytest.mark.gpu
@pytest.mark.gpu_alone  # a cache past 2^31 elements and its float64 copy
@pytest.mark.parametrize("shape", SPEC.large, ids=lambda s: s.id)
def test_cache_past_2_31_elements(shape):
    assert_valid(SPEC, shape, torch.bfloat16, "randn")


@pytest.mark.gpu
def test_one_compile_per_path_across_batch_context_and_tokens(monkeypatch):
    from tritonkit.ops.paged_attention import kernel

    kernels = [
        kernel._paged_attention_decode_kernel,
        kernel._paged_attention_merge_kernel,
        kernel._paged_attention_prefill_kernel,
        kernel._paged_attention_prefill_merge_kernel,
    ]
    for k in kernels:
        k.device_caches.clear()
    heads = dict(num_heads=32, num_kv_heads=8, head_dim=128, block_size=16)
    shapes = [Shape(num_seqs=b, q_len=1, context=c, **heads) for b in (1, 3, 16, 64) for c in (1, 15, 700, 5000)]
    shapes += [
        Shape(num_seqs=b, q_len=n, context=c, **heads)
        for b, n, c in (
            (1, 17, 0),
            (1, 1000, 0),
            (2, 4096, 100),
            (3, (1, 300, 2), (5, 0, 4000)),
            (1, 64, 8000),
            (2, 100, (3000, 9000)),
            (3, (1, 70, 1), (4000, 5000, 10)),
        )
    ]
    # the plans the calls took (on sm_90 the prompts' prefill is kernel_hopper's, which this count leaves out)
    plans, take = [], config.launch_plan
    monkeypatch.setattr(config, "launch_plan", lambda *a: plans.append(take(*a)) or plans[-1])
    for s in shapes:
        SPEC.call(_inputs(s))
    assert len(plans) == len(shapes)
    dev = torch.cuda.current_device()
    counts = {k.fn.__name__: len(k.device_caches[dev][0]) for k in kernels}
    # the prefill kernel compiles once per (tile rows, split or not) bucket the batches pick, its merge once per
    # split bucket's rows
    # (the decode kernel once per (rows, stages) it launches with, its merge once per row bucket)
    picks, rows, merged, merges = set(), set(), set(), set()
    for plan in plans:
        if plan.prefill is not None:
            if not plan.prefill.hopper:
                picks.add((plan.prefill.block_m, plan.prefill.num_splits > 1))
            if plan.prefill.num_splits > 1:
                merges.add((plan.prefill.block_m, config.prefill_merge_rows(plan.prefill.num_splits)))
        if plan.decode is not None:
            rows.add((plan.decode.block_m, plan.decode.num_stages))
            if plan.decode.num_splits > 1:
                merged.add(plan.decode.block_m)
    assert rows and (len(picks) >= 3 or any(p.prefill is not None and p.prefill.hopper for p in plans))
    expect = {
        "_paged_attention_prefill_kernel": len(picks),
        "_paged_attention_decode_kernel": len(rows),
        "_paged_attention_merge_kernel": len(merged),
        "_paged_attention_prefill_merge_kernel": len(merges),
    }
    assert counts == expect, (counts, picks, rows)


def test_merge_is_a_programmatic_dependent_launch_only_where_the_device_has_it(monkeypatch):
    # sm_90+ CUDA devices: the merge kernel launches with launch_pdl (its launcher carries the attribute) and the
    # PDL branch that waits on the decode grid, and the decode kernel triggers it; elsewhere neither kernel has it
    from compile_keys import Recorder
    import tritonkit.ops.paged_attention.api as api

    assert not config.merge_pdl(torch.device("cpu"))
    if not torch.cuda.is_available():
        assert not config.merge_pdl(torch.device("meta"))
    shape = Shape(num_seqs=2, q_len=1, context=4000, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16)
    for pdl in (False, True):
        recs = {n: Recorder() for n in ("_paged_attention_decode_kernel", "_paged_attention_merge_kernel")}
        for n, rec in recs.items():
            monkeypatch.setattr(api, n, rec)
        monkeypatch.setattr(config, "merge_pdl", lambda device, pdl=pdl: pdl)
        inp = _inputs(shape)
        paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], **_kwargs(inp))
        ((_, _, dec_kw),) = recs["_paged_attention_decode_kernel"].launches
        ((_, _, merge_kw),) = recs["_paged_attention_merge_kernel"].launches
        assert dec_kw["PDL_TRIGGER"] is pdl and merge_kw["PDL"] is pdl
        assert merge_kw.get("launch_pdl", False) is pdl


def test_interpreter_tolerance_follows_the_interpreter_at_call_time(monkeypatch):
    # decided when asked, not at import: `tritonkit validate` may switch the interpreter on after importing specs
    from triton import knobs

    monkeypatch.setattr(knobs.runtime, "interpret", False)
    gpu = SPEC.tolerance_for(torch.bfloat16)
    monkeypatch.setattr(knobs.runtime, "interpret", True)
    interp = SPEC.tolerance_for(torch.bfloat16)
    assert interp.compute_eps > gpu.compute_eps and interp.rtol > gpu.rtol and "interpreter" in interp.reason
    assert SPEC.tolerance_for(torch.float16) is SPEC.tolerance[torch.float16]


def test_short_queries_take_the_wide_decode_rows_only_where_the_batch_fills_the_card(monkeypatch):
    # queries of 5-32 tokens at group 4: the wide decode rows (64, or 128 past 64 query rows) where sequences x KV
    # heads fill the SMs; a smaller batch takes the prefill kernel and its KV splits (docs/notes/prefill-splits.md)
    from tritonkit.ops.paged_attention import api

    keys = config.PREFILL_SHORT_KEYS + 1
    assert config.decode_block_m(4, 64, 8, 66, 2, 132, keys) == config.decode_block_m(4, 64, 16, 66, 2, 132, keys) == 64
    assert config.decode_block_m(4, 64, 20, 66, 2, 132, keys) == config.DECODE_WIDE_ROWS == 128
    assert config.decode_block_m(4, 64, 16, 65, 2, 132, keys) == 16  # 130 programs for 132 SMs: the prefill kernel
    assert config.decode_block_m(4, 64, 16, 65, 2, 132, keys - 1) == 64  # few keys: the wide rows still
    assert config.decode_block_m(4, 64, 33, 66, 2, 132, keys) == config.decode_block_m(4, 64, 1, 66, 2, 132, 9) == 16
    assert config.decode_block_m(4, 256, 16, 66, 2, 132, keys) == 16  # head_dim 256: the wide rows would not fit
    real = api.launch
    for num_seqs, sms, wide in ((2, 4, True), (1, 4, False)):
        monkeypatch.setattr(config, "num_sms", lambda device, sms=sms: sms)
        shape = Shape(
            num_seqs=num_seqs, q_len=16, context=1100, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16
        )
        launched = []
        monkeypatch.setattr(
            api, "launch", lambda kernel, *a, **k: launched.append((kernel, a, k)) or real(kernel, *a, **k)
        )
        assert_valid(SPEC, shape, torch.bfloat16, "randn")
        kernels = [k for k, _, _ in launched]
        assert (api._paged_attention_prefill_kernel not in kernels) is wide
        rows = {a[2]["BLOCK_M"] for k, a, _ in launched if k is api._paged_attention_decode_kernel}
        assert rows == {64} if wide else rows <= {16}, rows  # one sequence: the prefill kernel alone


def test_batches_of_short_prompts_take_the_small_tiles_where_the_hopper_one_would_run(monkeypatch):
    """A batch whose rows see at most PREFILL_BATCH_SHORT_KEYS keys, which the rule would give Hopper's tile, takes
    kernel.py's small tile instead; everything else keeps its tile; TRITONKIT_PREFILL_BATCH_SHORT_KEYS=0 restores the
    rule; and the batch is right on that tile (the interpreter: kernel.py's largest tile stands in for Hopper's)."""
    from tritonkit.ops import overrides

    def tile(n, t, keys=None, hopper=True):
        p = config.launch_plan(4, 128, 2, n, n * t, 8, t, keys or t, 132, hopper).prefill
        return p.block_m, p.hopper

    assert config.PREFILL_BATCH_SHORT_KEYS == 256 and config.PREFILL_BATCH_SHORT_ROWS == 64
    assert tile(8, 256) == tile(16, 128) == tile(16, 64) == (64, False)
    assert tile(8, 512) == tile(8, 64, keys=4096) == (128, True)  # more keys: the big tile still
    assert tile(8, 64) == (32, False)  # what the rule gave a small batch already: unchanged
    assert tile(8, 256, hopper=False) == (config._prefill_tile(4, 128).block_m, False)  # measured on sm_90 only
    with overrides(config, PREFILL_BATCH_SHORT_KEYS=0):
        assert tile(8, 256) == tile(16, 64) == (128, True)
    with overrides(config, PREFILL_BATCH_SHORT_ROWS=128):
        assert tile(8, 256) == (128, False)
    # a batch whose big-tile programs fill 2 SMs: the largest tile without the rule, the small one with it
    monkeypatch.setattr(config, "num_sms", lambda device: 2)
    shape = Shape(num_seqs=3, q_len=(40, 17, 33), context=0, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16)
    for keys, rows in ((0, config._prefill_tile(4, 64).block_m), (256, config.PREFILL_BATCH_SHORT_ROWS)):
        with overrides(config, PREFILL_BATCH_SHORT_KEYS=keys, PREFILL_BATCH_SHORT_HOPPER_ONLY=False):
            n = shape["num_seqs"]
            plan = config.launch_plan(4, 64, 2, n, sum(shape["q_len"]), 2, 40, 40, 2)
            assert plan.prefill.block_m == rows and plan.decode is None
            assert_valid(SPEC, shape, torch.bfloat16, "randn")


def test_the_prefill_tile_and_splits_follow_the_batch():
    # Llama-3-8B heads (group 4), 132 SMs: (rows, splits) per batch, as docs/notes/prefill-splits.md measured them
    def pick(num_seqs, q_len, keys):
        c = config.prefill_config(4, 128, 2, num_seqs, num_seqs * q_len, q_len, 8, keys, 132)
        assert c.block_q == c.block_m // 4 and c.num_warps == max(4, c.block_m // 16)
        assert c.block_n == (32 if keys <= config.PREFILL_SHORT_KEYS and c.block_m <= 64 else 64)
        return c.block_m, c.num_splits

    # a query that fits one 256-row tile: 64-row tiles, split for two programs a SM (32 programs x 8)
    assert pick(1, 64, 16384) == (64, 8)
    assert pick(1, 64, 4096) == (64, 8)
    assert pick(4, 64, 16384) == (64, 2)
    # a short prompt: 32-row tiles of 32 keys, 2 stages, one split; alone, no decode launch
    short = config.prefill_config(4, 128, 2, 1, 64, 64, 8, 64, 132)
    assert (short.block_m, short.block_n, short.num_stages, short.num_splits) == (32, 32, 2, 1)
    assert config.prefill_config(4, 128, 2, 1, 512, 512, 8, 512, 132).block_n == 32
    assert config.prefill_alone(1, 4, 16, 16, 32, 16) and not config.prefill_alone(2, 4, 16, 16, 32, 32)
    assert not config.prefill_alone(1, 4, 16, 2000, 32, 16)  # a 16-token chunk over a long cache: wide decode rows
    assert not config.prefill_alone(1, 4, 4, 16, 4, 4)  # within the narrow decode rows
    # chunks over at least 4x their length in keys: 256-row tiles split for one program a SM
    assert pick(1, 256, 16384) == (256, 4)
    assert pick(1, 512, 16384) == (256, 2)
    assert pick(1, 1024, 16384) == (256, 1)  # 128 programs: too few keys a split for two
    # prompts: the largest tile whose programs fill the card
    assert pick(1, 512, 512) == (64, 1)
    assert pick(1, 1024, 1024) == (128, 1)
    assert pick(1, 2048, 2048) == (256, 1)
    assert pick(64, 64, 16384) == (256, 1)  # 512 programs of 256 rows
    # no more than MAX_SPLITS however long the keys; head_dim 256 keeps its one tile
    assert config.prefill_splits(1, 1, 2**30, 132) == config.MAX_SPLITS
    assert config.prefill_config(4, 256, 2, 1, 64, 64, 8, 16384, 132).block_m == 128


_SPLIT_PREFILL = [
    Shape(num_seqs=1, q_len=70, context=300, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16),
    Shape(
        num_seqs=3,
        q_len=(1, 70, 40),
        context=(200, 330, 250),
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        block_size=16,
        window_left=100,
        softcap=8.0,
        sinks=1,
    ),
    Shape(
        num_seqs=2, q_len=(80, 9), context=(260, 300), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16, causal=0
    ),
    Shape(num_seqs=1, q_len=40, context=280, num_heads=14, num_kv_heads=2, head_dim=80, block_size=16),
    # past one 256-row tile, over 4x its length in keys: the 256-row tiles split
    Shape(num_seqs=2, q_len=(150, 1), context=(500, 20), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16),
    Shape(
        num_seqs=2,
        q_len=(1, 70),
        context=(300, 290),
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        block_size=16,
        kv_dtype="fp8",
    ),
]


@pytest.mark.parametrize("shape", _SPLIT_PREFILL, ids=_ids(_SPLIT_PREFILL))
def test_split_prefill_matches_the_reference_with_every_feature(monkeypatch, shape):
    # splits from 64 keys, so short contexts split (up to 6 ways) and some splits of the diagonal tiles are empty
    from tritonkit.ops.paged_attention import api

    monkeypatch.setattr(config, "PREFILL_MIN_KEYS_PER_SPLIT", 64)
    monkeypatch.setattr(config, "PREFILL_SMALL_MIN_KEYS_PER_SPLIT", 64)
    grids = []
    real = api.launch
    monkeypatch.setattr(
        api, "launch", lambda kernel, grid, *a, **k: (grids.append((kernel, grid)), real(kernel, grid, *a, **k))
    )
    for family in ("randn", "constant"):
        assert_valid(SPEC, shape, torch.bfloat16, family)
    pre = [g for k, g in grids if k is api._paged_attention_prefill_kernel]
    assert pre and all(g[1] > 1 for g in pre), pre
    group = shape["num_heads"] // shape["num_kv_heads"]
    q = shape["q_len"] if isinstance(shape["q_len"], tuple) else (shape["q_len"],)
    # (these keys are few: a query that fits one 256-row tile takes the short prompts' 32-row tiles; the 64-row
    # split path is the boundary's 70 tokens over 2170 keys)
    big = max(q) * group > 256
    assert config.prefill_config(
        group, shape["head_dim"], 2, shape["num_seqs"], sum(q), max(q), shape["num_kv_heads"], 650
    ).block_m == (256 if big else 32)
    assert any(k is api._paged_attention_prefill_merge_kernel for k, _ in grids)


@pytest.mark.parametrize("block_size", [8, 16, 24, 32, 48, 64])
def test_any_page_size_matches_the_reference(block_size):
    # a KV tile's keys map to pages by key // block_size: pages that split a tile, hold several tiles or are not a
    # power of two, for decode (no key, one key, short and longer contexts) and prefill (causal diagonal tiles)
    for shape in (
        Shape(
            num_seqs=4,
            q_len=1,
            context=(0, 23, 70, 130),
            num_heads=4,
            num_kv_heads=2,
            head_dim=64,
            block_size=block_size,
        ),
        Shape(
            num_seqs=2, q_len=(40, 3), context=(9, 50), num_heads=4, num_kv_heads=2, head_dim=64, block_size=block_size
        ),
    ):
        inp = _inputs(shape)
        _assert_matches(paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], **_kwargs(inp)), inp)


# batches of several prompts past the wide decode rows (64 tokens at group 2): equal (the bench's "8 sequences"
# series, scaled down), unequal over a context, and a decode sequence that an understated max_seqlen_q lets through
# the rule (the prefill kernel then takes it too)
_PROMPTS = [
    Shape(num_seqs=3, q_len=70, context=0, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16),
    Shape(num_seqs=3, q_len=(70, 66, 70), context=(0, 7, 0), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16),
    Shape(num_seqs=3, q_len=(1, 70, 70), context=(40, 5, 0), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16),
]


@pytest.mark.parametrize("shape", _PROMPTS, ids=_ids(_PROMPTS))
def test_several_prompts_take_the_prefill_kernel_alone_with_the_switch(monkeypatch, shape):
    from tritonkit.ops import overrides
    from tritonkit.ops.paged_attention import api

    inp = _inputs(shape)
    kw = _kwargs(inp)
    q_lens = shape["q_len"] if isinstance(shape["q_len"], tuple) else (shape["q_len"],) * shape["num_seqs"]
    group = shape["num_heads"] // shape["num_kv_heads"]
    if min(q_lens) <= config.decode_max_q(group):
        # understated: the longest query is 70, the call says 66 (141 tokens > 2 x 66 + 8 passes the rule)
        kw["max_seqlen_q"] = 66
    launched = []
    real = api.launch
    monkeypatch.setattr(api, "launch", lambda kernel, *a, **k: (launched.append(kernel), real(kernel, *a, **k)))
    with overrides(config, PREFILL_ALONE_PROMPTS=True):
        out = torch.full_like(inp["q"], 7.0)
        paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], out=out, **kw)
    assert launched == [api._paged_attention_prefill_kernel], launched
    _assert_matches(out, inp)
    # off: the decode grid launches beside it
    launched.clear()
    with overrides(config, PREFILL_ALONE_PROMPTS=False):
        paged_attention(inp["q"], inp["k_cache"], inp["v_cache"], **_kwargs(inp))
    assert api._paged_attention_decode_kernel in launched


def test_prefill_alone_only_where_no_sequence_can_be_a_decode_one():
    from tritonkit.ops import overrides

    with overrides(config, PREFILL_ALONE_PROMPTS=True):
        # (num_seqs, group, max_seqlen_q, max_keys, decode_rows_q, num_tokens)
        assert config.prefill_alone(8, 4, 256, 256, 4, 8 * 256)
        assert config.prefill_alone(2, 4, 256, 256, 4, 256 + 5)
        assert not config.prefill_alone(2, 4, 256, 256, 4, 256 + 4)  # 256 + 4: the second may hold 4 tokens
        assert not config.prefill_alone(65, 4, 448, 4096, 4, 512)  # a prompt beside 64 decode sequences
        plan = config.launch_plan(4, 128, 2, 8, 8 * 256, 8, 256, 256, 132)
        assert plan.decode is None and plan.prefill_skips_q == 0
    with overrides(config, PREFILL_ALONE_PROMPTS=False):
        assert not config.prefill_alone(8, 4, 256, 256, 4, 8 * 256)
        assert config.launch_plan(4, 128, 2, 8, 8 * 256, 8, 256, 256, 132).decode is not None


def test_the_prefill_alone_switch_reads_the_environment():
    assert config.PREFILL_ALONE_PROMPTS is (
        os.environ.get("TRITONKIT_PREFILL_ALONE_PROMPTS", "1").strip() not in ("", "0")
    )


# the boundary list's decode-only shapes (page edges, splits, speculative rows, GQA 7 at head_dim 80), and decode with
# a two-sided window, softcap and sinks, an fp8 cache, group 16, pages of 1 and 32 keys, head_dim 128, a left window
_KEY_WARPS_CASES = [
    _s
    for _s in BOUNDARY
    if (max(_s["q_len"]) if isinstance(_s["q_len"], tuple) else _s["q_len"]) * (_s["num_heads"] // _s["num_kv_heads"])
    <= config.DECODE_BLOCK_M
    and _s["head_dim"] <= 128
] + [
    Shape(num_seqs=2, q_len=1, context=(100, 47), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16, causal=0,
          window_left=5, window_right=3),
    Shape(num_seqs=2, q_len=1, context=(300, 40), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16, sinks=1,
          softcap=5.0),
    Shape(num_seqs=2, q_len=(1, 3), context=(1100, 20), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
          kv_dtype="fp8"),
    # group 16 (one token a program), every key its own page, head_dim 128 on pages of 32, a left window alone
    Shape(num_seqs=3, q_len=1, context=(15, 30, 70), num_heads=16, num_kv_heads=1, head_dim=64, block_size=16),
    Shape(num_seqs=2, q_len=1, context=(9, 40), num_heads=4, num_kv_heads=2, head_dim=64, block_size=1),
    Shape(num_seqs=2, q_len=1, context=(64, 300), num_heads=8, num_kv_heads=2, head_dim=128, block_size=32),
    Shape(num_seqs=2, q_len=1, context=(500, 33), num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
          window_left=40),
]  # fmt: skip


@pytest.mark.parametrize("key_warps", [2, 4])
@pytest.mark.parametrize("shape", _KEY_WARPS_CASES, ids=_ids(_KEY_WARPS_CASES))
def test_decode_with_keys_dealt_to_warps_matches_the_reference(monkeypatch, shape, key_warps):
    """TRITONKIT_DECODE_KEY_WARPS (config.DECODE_KEY_WARPS): each warp of a narrow decode program takes its own keys
    of a tile and keeps its own softmax state, merged once a program. Every decode launch of these calls takes it."""
    from tritonkit.ops import overrides
    from tritonkit.ops.paged_attention import api

    launched = []
    real = api.launch
    monkeypatch.setattr(
        api, "launch", lambda kernel, grid, *a, **k: (launched.append(a[1]), real(kernel, grid, *a, **k))
    )
    with overrides(config, DECODE_KEY_WARPS=key_warps):
        for family in ("randn", "constant"):
            assert_valid(SPEC, shape, torch.bfloat16, family)
    picks = {k["KEY_WARPS"] for k in launched if "KEY_WARPS" in k}
    assert picks == {key_warps}, picks
