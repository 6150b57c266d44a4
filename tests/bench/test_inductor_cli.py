import pytest

from tritonkit.bench import inductor_cli
from tritonkit.ops import OP_NAMES


@pytest.fixture
def no_compile(monkeypatch):
    """Stands in for Inductor: records the inputs it was handed and returns one piece of fake output code."""
    seen = {}

    def fake(fn, inputs):
        seen["inputs"] = inputs
        return None, ["k_0 = async_compile.cpp_pybinding(['x'], '''...''')\n"]

    monkeypatch.setattr("torch._inductor.utils.run_and_get_code", fake)
    return seen


@pytest.mark.parametrize("op", OP_NAMES)
def test_every_builtin_op_gets_a_shape_and_inputs(op, tmp_path, no_compile, capsys):
    # paged_attention's sweep point counts sequences and has no num_tokens key: it used to raise KeyError here.
    # fused_moe's default model (Mixtral) has 5.6 GB of float32 expert weights: a narrow intermediate keeps the
    # suite's peak memory under 4 GB and still takes the default-model and shape-key path
    shape = "num_tokens=2,inter=64" if op == "fused_moe" else "num_tokens=2"
    assert inductor_cli.main([op, "--shape", shape, "--dtype", "float32", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob(f"inductor_{op}_*.py")
    assert no_compile["inputs"] and str(path) in capsys.readouterr().out


def test_paged_attention_without_shape_defaults_to_a_small_decode_batch(tmp_path, no_compile):
    assert inductor_cli.main(["paged_attention", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("inductor_paged_attention_*.py")
    assert f"num_seqs={inductor_cli.DEFAULT_SEQS}," in path.read_text().splitlines()[1]
    assert no_compile["inputs"]["q"].shape[0] == inductor_cli.DEFAULT_SEQS


def test_num_tokens_overrides_the_sequence_count(tmp_path, no_compile):
    assert inductor_cli.main(["paged_attention", "--shape", "num_tokens=3", "--out", str(tmp_path)]) == 0
    assert no_compile["inputs"]["seqused_k"].numel() == 3


@pytest.mark.parametrize("bad", ["num_tokens=0", "num_tokens=abc", "num_tokens=2.5"])
def test_bad_num_tokens_is_named(bad, tmp_path, capsys):
    assert inductor_cli.main(["rms_norm", "--shape", bad, "--out", str(tmp_path)]) == 2
    assert "--shape num_tokens must be a positive integer" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_paged_attention_compiles_for_real(tmp_path, capsys):
    # the reference gathers pages per sequence: one decode sequence keeps the compile short on a CPU
    assert inductor_cli.main(["paged_attention", "--shape", "num_tokens=1", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("inductor_paged_attention_*.py")
    names = [n for n, _ in inductor_cli.kernel_names(path.read_text())]
    out = capsys.readouterr().out
    assert names and all(n in out for n in names)
