import subprocess
import sys

import tritonkit
from tritonkit.cli import main


def test_version_prints_the_package_version_and_exits_0():
    p = subprocess.run([sys.executable, "-m", "tritonkit", "--version"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"tritonkit {tritonkit.__version__}\n" and p.stderr == ""


def test_version_is_listed_in_the_usage(capsys):
    assert main(["--help"]) == 0
    assert "tritonkit --version" in capsys.readouterr().out


def test_unknown_command_names_it(capsys):
    assert main(["--versoin"]) == 2
    assert "unknown command '--versoin'" in capsys.readouterr().err


def test_output_cut_short_by_the_reader_is_not_a_traceback():
    import subprocess
    import sys

    # `true` exits without reading: the page is written to a pipe nobody reads (`| head -1` on a long page)
    proc = subprocess.run(
        f"{sys.executable} -m tritonkit check --explain int32-offset | true",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
