"""The ops' configuration switches read from the environment at import."""

import os


def flag(name: str) -> bool | None:
    """A switch that may be left unset: None where ``name`` is unset or empty, else whether it is other than "0"."""
    value = os.environ.get(name, "").strip()
    return None if value == "" else value != "0"


def choice(name: str, choices: tuple[int, ...], default: int) -> int:
    """The integer environment variable ``name`` holds, one of ``choices``; ``default`` where it is unset or empty
    (another value is a ValueError naming the variable and the choices)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if text not in {str(c) for c in choices}:
        raise ValueError(f"{name}={text!r}: expected one of {', '.join(map(str, choices))}")
    return int(text)
