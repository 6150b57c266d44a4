"""What the tools' writes (-o, --write-baseline, validate --json) do to what is already at the path: a file there is
replaced only when the user said so (--force), never when the run reads it; a link only leads to a stream."""

import os
import stat
import subprocess
import sys

import pytest

from tritonkit import _fileio
from tritonkit._fileio import replace_refusal, write_atomic


def test_a_regular_file_is_replaced_whole_and_keeps_its_mode(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("old")
    p.chmod(0o640)
    write_atomic(str(p), "new")
    assert p.read_text() == "new" and stat.S_IMODE(p.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["r.json"]  # no temporary left


def test_a_new_file_is_made_and_an_existing_one_left_whole_without_replace(tmp_path):
    new = tmp_path / "new.json"
    write_atomic(str(new), "made", replace=False)
    assert new.read_text() == "made"
    with pytest.raises(FileExistsError):
        write_atomic(str(new), "again", replace=False)
    assert new.read_text() == "made" and os.listdir(tmp_path) == ["new.json"]


def test_a_file_that_appears_while_the_text_is_written_is_not_replaced(tmp_path, monkeypatch):
    # another process creates the file between the check and the rename: its file stays, the text goes nowhere
    out = tmp_path / "r.json"
    real_open = open

    def racing_open(path, mode="r"):
        out.write_text("theirs")
        return real_open(path, mode)

    monkeypatch.setattr(_fileio, "open", racing_open, raising=False)
    with pytest.raises(FileExistsError):
        write_atomic(str(out), "ours", replace=False)
    assert out.read_text() == "theirs" and os.listdir(tmp_path) == ["r.json"]


def test_an_existing_file_is_refused_unless_forced_and_an_input_even_then(tmp_path):
    f = tmp_path / "r.json"
    assert replace_refusal(str(f)) is None  # nothing there yet
    f.write_text("old")
    assert "pass --force to replace it" in replace_refusal(str(f))
    assert replace_refusal(str(f), force=True) is None
    src = tmp_path / "k.py"
    src.write_text("x = 1\n")
    why = replace_refusal(str(src), True, [(str(tmp_path / "." / "k.py"), "the checked source k.py")])
    assert "the checked source k.py" in why and "even with --force" in why


def test_a_link_to_a_file_is_refused_saying_where_it_points(tmp_path):
    (tmp_path / "artifacts").mkdir()
    target = tmp_path / "artifacts" / "r.json"
    target.write_text("old")
    link = tmp_path / "out"
    link.symlink_to(target)
    for force in (False, True):
        why = replace_refusal(str(link), force)
        assert why and "symbolic link" in why and str(target) in why
    dangling = tmp_path / "later"
    dangling.symlink_to(tmp_path / "artifacts" / "later.json")
    assert "later.json, which is not there" in replace_refusal(str(dangling), True)
    assert target.read_text() == "old" and not (tmp_path / "artifacts" / "later.json").exists()


def test_a_link_to_a_stream_or_a_sink_is_accepted(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for name, to in (("to_null", "/dev/null"), ("to_fifo", fifo), ("to_stdout", "/dev/stdout")):
        (tmp_path / name).symlink_to(to)
        assert replace_refusal(str(tmp_path / name)) is None, name
    assert replace_refusal("/dev/stdout") is None and replace_refusal("/dev/null") is None


def test_stdout_sent_to_a_file_is_written_into_not_replaced(tmp_path):
    # `tritonkit check k.py -o /dev/stdout > log`: /dev/stdout leads to the log file the shell opened; the text goes
    # after what the process printed, into the same file, which stays the file the shell holds
    log = tmp_path / "log"
    code = (
        "import os, sys; from tritonkit._fileio import replace_refusal, write_atomic\n"
        "print('printed first', flush=True)\n"
        "assert replace_refusal('/dev/stdout') is None\n"
        "write_atomic('/dev/stdout', 'the report\\n', replace=False)\n"
        "print(os.fstat(1).st_ino)"
    )
    with open(log, "w") as fh:
        r = subprocess.run([sys.executable, "-c", code], stdout=fh, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    first, report, ino = log.read_text().splitlines()
    assert (first, report) == ("printed first", "the report") and int(ino) == os.stat(log).st_ino


def test_the_api_follows_a_link_to_its_file_when_asked_to_replace(tmp_path):
    # write_atomic itself (replace=True) still keeps a link a link; the tools refuse such a link before writing
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


@pytest.mark.parametrize("sink", ["/dev/null", "/dev/zero"])
def test_a_sink_stays_a_device(sink):
    # /dev/zero discards what is written as /dev/null does: both stay accepted sinks (docs/check.md)
    if not os.path.exists(sink):
        pytest.skip(f"no {sink}")
    before = os.stat(sink)
    assert _fileio.refusal(sink) is None and replace_refusal(sink) is None
    write_atomic(sink, "nothing", replace=False)
    after = os.stat(sink)
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
