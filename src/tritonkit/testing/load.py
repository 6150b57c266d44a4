"""Find the OpSpecs ``tritonkit validate`` was named: built-in ops, a user's spec file, or one spec by name.

A target is one of
  rms_norm                 a built-in op;
  path/to/specs.py         every OpSpec at the top level of that file;
  mypkg.specs              every OpSpec at the top level of that module;
  mypkg.specs:MY_SPEC      one (the module may be a file path too: path/to/specs.py:MY_SPEC).

Files import as ``tritonkit check`` imports them (its ``import_target``): a file inside a package imports as part
of it, with the package's root on sys.path; a loose file with its own folder on sys.path; the current directory is
on sys.path as under pytest. Unlike the checker this imports with TRITON_INTERPRET as the caller set it, so that a
user's kernels run under the interpreter on a CPU (triton.jit reads it when a kernel is defined).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType

from .._imports import import_file
from ..check.capture.isolate import raised_by_code
from ..spec import OpSpec


class LoadError(Exception):
    """A target that names no OpSpec: the message is one line, fit for the CLI."""


_TRITONKIT_DIR = str(Path(__file__).resolve().parents[1])


def _where(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    # the deepest frame outside tritonkit and the import machinery: the user's line (an OpSpec that raises in its
    # __post_init__ points at the line that built it, not at dataclasses' generated "<string>" __init__)
    user = [
        f
        for f in frames
        if not f.filename.startswith((_TRITONKIT_DIR, "<")) and os.sep + "importlib" + os.sep not in f.filename
    ]
    f = (user or frames or [None])[-1]
    return f" (at {f.filename}:{f.lineno})" if f is not None else ""


def _is_file(text: str, base: str | None = None) -> bool:
    return text.endswith(".py") or os.sep in text or (os.altsep or os.sep) in text or Path(base or "", text).is_file()


def _import(text: str, base: str | None = None) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        if _is_file(text, base):
            p = Path(base or "", text)
            if not p.is_file():
                raise LoadError(f"{text}: no such file")
            return import_file(p)
        return importlib.import_module(text)
    except LoadError:
        raise
    except KeyboardInterrupt as e:
        if not raised_by_code(e):
            raise
        raise LoadError(f"{text}: failed to import: its code raised KeyboardInterrupt{_where(e)}") from None
    except ModuleNotFoundError as e:
        if not _is_file(text, base) and e.name and (text == e.name or text.startswith(e.name + ".")):
            raise LoadError(f"{text}: no such module (and no such file)") from None
        raise LoadError(f"{text}: failed to import: {type(e).__name__}: {e}{_where(e)}") from None
    except BaseException as e:  # noqa: BLE001 - SystemExit from a script is a failed import too
        first = (str(e).strip().splitlines() or [""])[0]
        raise LoadError(f"{text}: failed to import: {type(e).__name__}: {first}{_where(e)}") from None


def specs_in(module: ModuleType) -> list[OpSpec]:
    """Every OpSpec at the top level of ``module``, in definition order, each once."""
    seen: dict[int, OpSpec] = {}
    for v in vars(module).values():
        if isinstance(v, OpSpec):
            seen.setdefault(id(v), v)
    return list(seen.values())


def load_specs(target: str, builtin: tuple[str, ...] = (), base: str | None = None) -> list[OpSpec]:
    """The OpSpecs ``target`` names (see the module docstring), a relative file path read from ``base`` (default:
    the current directory); LoadError when it names none."""
    if target in builtin:
        from ..ops import get_spec

        return [get_spec(target)]
    module_part, colon, attr = target.rpartition(":")
    # "C:\\specs.py" is a Windows path, not module:NAME
    if colon and attr and not (len(module_part) == 1 and attr.startswith(("\\", "/"))):
        mod = _import(module_part, base)
        if not hasattr(mod, attr):
            found = ", ".join(n for n, v in vars(mod).items() if isinstance(v, OpSpec)) or "none"
            raise LoadError(f"{target}: {module_part} has no {attr!r} (its OpSpecs: {found})")
        v = getattr(mod, attr)
        if not isinstance(v, OpSpec):
            raise LoadError(f"{target}: {attr} is a {type(v).__name__}, not an OpSpec")
        return [v]
    if not _is_file(target, base) and "." not in target:
        names = ", ".join(builtin)
        raise LoadError(
            f"unknown op {target!r}; built-in ops: {names}; or a spec file (path/to/specs.py), a module "
            "(mypkg.specs) or one spec (mypkg.specs:MY_SPEC)"
        )
    specs = specs_in(_import(target, base))
    if not specs:
        raise LoadError(f"{target}: defines no OpSpec at its top level")
    return specs
