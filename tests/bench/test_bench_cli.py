import os
import subprocess
import sys

import pytest
import torch

from tritonkit.bench.inductor_cli import kernel_names

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")


def _run(*args, **kw):
    return subprocess.run([sys.executable, "-m", "tritonkit", *args], capture_output=True, text=True, **kw)


def test_bench_without_a_gpu_says_so_and_fails():
    proc = _run("bench", "rms_norm", "--models", "llama3-8b")
    assert proc.returncode != 0
    assert "no CUDA GPU" in proc.stderr and "--compare" in proc.stderr
    assert proc.stdout == ""


def test_inductor_on_cpu_writes_generated_code_for_rms_norm(tmp_path):
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    proc = _run(
        "inductor", "rms_norm", "--shape", "num_tokens=4,hidden=64", "--out", str(tmp_path), env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    assert "emits C++" in proc.stdout
    (path,) = tmp_path.glob("inductor_rms_norm_*.py")
    assert str(path) in proc.stdout
    code = path.read_text()
    # Inductor's wrapper module around a C++ kernel that fuses the residual add, the mean of squares and rsqrt
    assert "async_compile.cpp_pybinding" in code and 'extern "C"' in code
    names = [n for n, _ in kernel_names(code)]
    assert names and all(n.startswith("cpp_fused") for n in names)
    assert any("rsqrt" in n for n in names)
    for n in names:
        assert n in proc.stdout
    assert "num_tokens=4,hidden=64,residual=1" in code.splitlines()[1]


def test_inductor_rejects_unknown_shape_keys_and_ops(tmp_path, capsys):
    from tritonkit.cli import main

    assert main(["inductor", "rms_norm", "--shape", "hiden=64", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "hiden" in err and "hidden" in err
    assert main(["inductor", "rms_nrom", "--out", str(tmp_path)]) == 2
    assert "rms_nrom" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_kernel_names_reads_triton_output_code():
    code = (
        "triton_red_fused_add_mean_0 = async_compile.triton('triton_red_fused_add_mean_0', '''\n"
        "import triton\n'''\n, device_str='cuda')\n"
        "triton_poi_fused_mul_1 = async_compile.triton('triton_poi_fused_mul_1', '''...''')\n"
        "    buf0 = empty_strided_cuda((4, 1), (1, 4), torch.float32)\n"
    )
    assert kernel_names(code) == [("triton_red_fused_add_mean_0", "triton"), ("triton_poi_fused_mul_1", "triton")]
