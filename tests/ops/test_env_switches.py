"""The ops' environment switches (ops._env)."""

import pytest

from tritonkit.ops import _env


@pytest.mark.parametrize("value, want", [(None, None), ("", None), ("  ", None), ("0", False), (" 0 ", False),
                                         ("1", True), ("yes", True)])  # fmt: skip
def test_a_flag_is_unset_off_or_on(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv("TK_TEST_FLAG", raising=False)
    else:
        monkeypatch.setenv("TK_TEST_FLAG", value)
    assert _env.flag("TK_TEST_FLAG") is want


def test_a_choice_is_one_of_its_values_or_names_the_bad_one(monkeypatch):
    monkeypatch.delenv("TK_TEST_CHOICE", raising=False)
    assert _env.choice("TK_TEST_CHOICE", (2, 3), 2) == 2
    monkeypatch.setenv("TK_TEST_CHOICE", " 3 ")
    assert _env.choice("TK_TEST_CHOICE", (2, 3), 2) == 3
    monkeypatch.setenv("TK_TEST_CHOICE", "4")
    with pytest.raises(ValueError, match=r"TK_TEST_CHOICE='4': expected one of 2, 3"):
        _env.choice("TK_TEST_CHOICE", (2, 3), 2)
