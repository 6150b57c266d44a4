"""Importing a user's file the way pytest would: shared by ``tritonkit check`` (case files) and
``tritonkit validate`` (spec files).

A file inside a package (folders with ``__init__.py``) imports as part of it, with the package's root on sys.path;
a loose file under a name of its own (one per path, so two ``cases.py`` never collide), with its folder on
sys.path.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def package_root(path: Path) -> tuple[Path, str]:
    """(the folder above the file's outermost package, the file's dotted module name from there)."""
    parts = [path.stem]
    d = path.parent
    while (d / "__init__.py").exists():
        parts.insert(0, d.name)
        d = d.parent
    return d, ".".join(parts)


def on_path(folder: Path | str) -> None:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def import_file(path: Path) -> ModuleType:
    """Import the Python file at ``path`` (see the module docstring); a file that fails leaves no module behind."""
    path = Path(path).resolve()
    root, dotted = package_root(path)
    if "." in dotted:
        on_path(root)
        return importlib.import_module(dotted)
    name = f"_tritonkit_user_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    on_path(path.parent)
    mspec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(mspec)
    sys.modules[name] = mod
    try:
        mspec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod
