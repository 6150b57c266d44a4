"""The README's set-up line resolves on a machine that has nothing but PyPI (pip's own configuration left out).

This machine's pip configuration adds a folder holding a CPU build of torch, which once hid a pin that PyPI could
not satisfy (torch 2.13.0 there requires triton 3.7.1, beside the README's triton==3.6.0). ``--isolated`` ignores
that configuration and the PIP_* variables; ``--dry-run --ignore-installed`` resolves without installing.
"""

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def readme_setup_args() -> list[str]:
    """The arguments of the README's set-up line (``pip install ARGS -e ... && tritonkit validate``), as .ci/run reads
    it: the first line that starts with ``pip install`` and installs the tree (``-e``)."""
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("pip install ") and " -e " in line:
            return shlex.split(line.split("&&")[0])[2:]
    raise AssertionError("README.md has no line starting with 'pip install ... -e' (the set-up command)")


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=10).close()
        return True
    except OSError:
        return False


def test_ci_installs_with_the_readme_line():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "grep -m1 '^pip install .* -e ' README.md" in ci and "python3 -m pytest" in ci


def test_the_setup_line_pins_the_gpu_images_triton_and_no_plotting_extras():
    args = readme_setup_args()
    assert "triton==3.6.0" in args
    assert "-e" in args and args[args.index("-e") + 1].startswith(".[")
    assert "bench" not in args[args.index("-e") + 1]


def _resolve(tmp_path, args: list[str]) -> dict[str, str]:
    """What pip would install for ``args`` from PyPI alone, on an empty environment: {name: version}."""
    report = tmp_path / "report.json"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--isolated",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--disable-pip-version-check",
        "--report",
        str(report),
        *args,
    ]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, f"{shlex.join(cmd)}\n{r.stderr[-3000:]}"
    return {
        i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
        for i in json.loads(report.read_text())["install"]
    }


def readme_keep_torch_args() -> list[str]:
    """The install the README gives for keeping the torch (and Triton) an environment has: ``pip install ARGS``."""
    text = (ROOT / "README.md").read_text()
    marker = "`pip install -e "
    assert marker in text, 'README.md no longer gives the keep-your-torch install (`pip install -e ".[...]"`)'
    return shlex.split(text[text.index(marker) + 1 :].split("`", 1)[0])[2:]


@pytest.mark.network
@pytest.mark.skipif(not _pypi_reachable(), reason="pypi.org is not reachable from this machine")
def test_the_readme_setup_line_resolves_against_pypi_alone(tmp_path):
    got = _resolve(tmp_path, readme_setup_args())
    assert got["triton"] == "3.6.0" and "torch" in got and "tritonkit" in got
    # numpy < 2.4 for Triton 3.6's interpreter; the CPU install stays lean: no plotting or terminal UI packages
    assert tuple(int(x) for x in got["numpy"].split(".")[:2]) < (2, 4)
    assert not {"matplotlib", "rich"} & got.keys(), sorted(got)


@pytest.mark.network
@pytest.mark.skipif(not _pypi_reachable(), reason="pypi.org is not reachable from this machine")
def test_the_keep_your_torch_install_keeps_vllm_034s_torch_and_triton(tmp_path):
    # vLLM 0.34.0 pins torch 2.14.0, which requires Triton 3.8.0: adding tritonkit the README's way beside them must
    # resolve with both kept (no downgrade of torch, no other Triton)
    args = readme_keep_torch_args()
    assert args[0] == "-e" and "bench" in args[1]
    got = _resolve(tmp_path, ["torch==2.14.0", *args])
    assert got["torch"] == "2.14.0" and got["triton"] == "3.8.0" and "tritonkit" in got
