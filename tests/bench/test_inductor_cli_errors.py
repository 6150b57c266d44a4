"""`tritonkit inductor`: a bad --out or --shape value is one line naming it, found before any compile."""

import pytest

from tritonkit.bench import inductor_cli


def test_out_naming_an_existing_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "taken"
    f.write_text("keep")
    assert inductor_cli.main(["rms_norm", "--out", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {str(f)!r} is a file" in err
    assert f.read_text() == "keep"


@pytest.mark.parametrize("bad, got", [("hidden=notanumber", "'notanumber'"), ("hidden=1.5", "1.5")])
def test_a_non_integer_shape_value_is_one_line(bad, got, tmp_path, capsys):
    assert inductor_cli.main(["rms_norm", "--shape", bad, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--shape hidden must be an integer (like 4096), got {got}" in err
    assert list(tmp_path.iterdir()) == []
