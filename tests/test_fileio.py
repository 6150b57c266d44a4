"""What the tools' writes (-o, --write-baseline, validate --json) do to what is already at the path."""

import os
import stat
import subprocess
import sys

import pytest

from tritonkit._fileio import write_atomic


def test_a_regular_file_is_replaced_whole_and_keeps_its_mode(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("old")
    p.chmod(0o640)
    write_atomic(str(p), "new")
    assert p.read_text() == "new" and stat.S_IMODE(p.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["r.json"]  # no temporary left


def test_a_link_stays_a_link_and_its_file_gets_the_text(tmp_path):
    (tmp_path / "artifacts").mkdir()
    target = tmp_path / "artifacts" / "r.json"
    target.write_text("old")
    link = tmp_path / "out"
    link.symlink_to(target)
    write_atomic(str(link), "new")
    assert link.is_symlink() and os.readlink(link) == str(target) and target.read_text() == "new"
    dangling = tmp_path / "later"
    dangling.symlink_to(tmp_path / "artifacts" / "later.json")
    write_atomic(str(dangling), "x")
    assert dangling.is_symlink() and (tmp_path / "artifacts" / "later.json").read_text() == "x"


def test_a_fifo_is_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(
        [sys.executable, "-c", f"print(open({str(fifo)!r}).read(), end='')"], stdout=subprocess.PIPE
    )
    write_atomic(str(fifo), "through")
    assert reader.communicate(timeout=30)[0] == b"through"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_dev_null_stays_a_device():
    before = os.stat("/dev/null")
    write_atomic("/dev/null", "nothing")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_device_is_an_error_not_a_new_file():
    with pytest.raises(OSError):
        write_atomic("/dev/full", "x" * 10000)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_link_to_the_processs_stdout_writes_to_it(tmp_path):
    # `ln -s /proc/self/fd/1 out; tritonkit check ... -o out` prints the report, and `out` stays a link
    link = tmp_path / "out"
    link.symlink_to("/proc/self/fd/1")
    code = f"from tritonkit._fileio import write_atomic; write_atomic({str(link)!r}, 'to stdout')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "to stdout" and link.is_symlink()


def _node(tmp_path, name, kind, major, minor):
    """A device node in tmp_path with numbers no driver here answers to (opening it would fail, not write);
    skips where this process may not make one."""
    path = tmp_path / name
    try:
        os.mknod(path, kind | 0o600, os.makedev(major, minor))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot make a device node here: {e}")
    return path


@pytest.mark.parametrize(
    "kind, numbers, why",
    [(stat.S_IFBLK, (7, 250), "block device"), (stat.S_IFCHR, (240, 7), r"character device \(240:7\)")],
    ids=["disk", "other-char-device"],
)
def test_a_disk_or_another_device_is_refused_untouched(tmp_path, kind, numbers, why):
    node = _node(tmp_path, "sda", kind, *numbers)
    before = os.lstat(node)
    with pytest.raises(OSError, match=why):
        write_atomic(str(node), "a report")
    after = os.lstat(node)
    assert (after.st_mode, after.st_rdev, after.st_ino) == (before.st_mode, before.st_rdev, before.st_ino)
    # a link to it is refused the same way
    link = tmp_path / "out"
    link.symlink_to(node)
    with pytest.raises(OSError, match=why):
        write_atomic(str(link), "a report")


def test_check_and_validate_refuse_a_disk_before_running(tmp_path, capsys):
    from tritonkit.check.cli import main as check_main
    from tritonkit.testing.cli import main as validate_main

    node = _node(tmp_path, "nvme0n1", stat.S_IFBLK, 7, 251)
    assert check_main(["--op", "rms_norm", "-o", str(node)]) == 2
    assert "cannot write the report" in capsys.readouterr().err
    assert validate_main(["rms_norm", "--json", str(node)]) == 2
    assert "block device" in capsys.readouterr().err
    assert stat.S_ISBLK(os.lstat(node).st_mode)
