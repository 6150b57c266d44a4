"""Another git revision's tritonkit, imported beside the running one: the machinery of ``tritonkit bench --base REV``.

:func:`checkout` resolves REV in the checkout tritonkit runs from and extracts that commit's ``src/`` (``git
archive``, no worktree) to ``.tritonkit/base/<sha>/``, once per sha. :meth:`BaseTree.import_package` imports its
``src/tritonkit`` as the top-level package ``tritonkit_base_<sha12>`` in this process; ``sys.modules["tritonkit"]``
stays the running tree. Inside the alias, and only there:

- absolute imports of ``tritonkit`` (``import tritonkit.x``, ``from tritonkit.x import y``, also inside functions,
  and ``importlib.import_module("tritonkit.x")``) resolve to the alias: each alias module gets its own
  ``__builtins__`` whose ``__import__`` renames them. A meta path finder could not do this: an import of a name
  already in ``sys.modules`` (the running ``tritonkit.*``) never reaches a finder, and a finder cannot tell who imports.
- the torch.library namespace ``tritonkit`` becomes the alias in the source as it is compiled (``"tritonkit::op"``
  literals, ``torch.ops.tritonkit``, ``Library("tritonkit"``). Registering ``tritonkit::op`` twice either fails or,
  in torch 2.13, silently replaces the running tree's op; renamed, both trees keep their own (eager calls launch
  Triton directly and never need them). The files on disk are not changed and no bytecode is cached.

Left unmapped: other string module names (``importlib.resources.files("tritonkit.x")``, ``sys.modules["tritonkit.x"]``,
``find_spec``, ``python -c "import tritonkit"`` in a child) reach the running tree, and a namespace built at run time
(``getattr(torch.ops, "tritonkit")``) is not renamed.

Base results are cached per revision and GPU under ``.tritonkit/base-results/<sha>/<gpu>/`` (:meth:`BaseTree.cache_dir`,
:func:`load_points`, :func:`save_points`).
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import types
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

PACKAGE = "tritonkit"
#: written last into a materialized tree: a folder without it is a killed run's leftover
MARKER = ".tritonkit-base-complete"
#: the results file format; another one reads as an empty cache
POINTS_FORMAT = "tritonkit-base-points/1"
# a temporary extraction older than this belongs to a killed run (an extraction takes seconds)
_STALE_S = 3600.0


class BaseTreeError(ValueError):
    """A base revision that cannot be used; the message is one line naming the revision and why."""


def _one_line(text: str) -> str:
    return "; ".join(s.strip() for s in text.strip().splitlines() if s.strip())


def _git(args: list[str], cwd: Path, rev: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise BaseTreeError(f"base revision {rev!r}: cannot run git ({type(e).__name__}: {e})") from e


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace").strip()


def find_repo(rev: str, repo: Path | None = None, package_dir: Path | None = None) -> Path:
    """The top of the git checkout to resolve ``rev`` in: ``repo``'s, else the one the running tritonkit
    (``package_dir``, default this package) is the ``src/tritonkit`` of."""
    if repo is not None:
        r = _git(["rev-parse", "--show-toplevel"], Path(repo), rev) if Path(repo).is_dir() else None
        if r is None or r.returncode != 0:
            why = _one_line(_text(r.stderr)) if r is not None else "no such folder"
            raise BaseTreeError(f"base revision {rev!r}: {repo} is not in a git checkout ({why})")
        return Path(_text(r.stdout))
    pkg = Path(package_dir or Path(__file__).resolve().parents[1]).resolve()
    r = _git(["rev-parse", "--show-toplevel"], pkg, rev)
    top = Path(_text(r.stdout)) if r.returncode == 0 else None
    # an installed copy inside some checkout (a .venv in the clone) is not that checkout's tree
    if top is None or (top / "src" / PACKAGE).resolve() != pkg:
        raise BaseTreeError(
            f"base revision {rev!r}: tritonkit runs from {pkg}, which is not the src/{PACKAGE} of a "
            f"git checkout; install it with `pip install -e` from a clone to compare revisions"
        )
    return top


def checkout(rev: str, repo: Path | None = None, *, store: Path | None = None) -> BaseTree:
    """Resolve ``rev`` (a sha, ``HEAD~3``, a branch: anything ``git rev-parse`` takes) and materialize that commit's
    ``src/`` under ``<store>/base/<sha>/`` (``store`` defaults to ``<repo>/.tritonkit``), reusing a complete one.

    ``repo``: a folder of the git checkout; default the checkout the running tritonkit comes from. Where there is
    no checkout (the tree copied to a GPU machine), a sha (or prefix) whose tree was materialized beforehand and
    carried in ``<store>/base/`` is used as it is. Raises :class:`BaseTreeError` (a ValueError, one line) for a bad
    revision, no checkout, or a tree without src/tritonkit.
    """
    if not rev or rev.startswith("-"):
        raise BaseTreeError(f"base revision {rev!r}: not a git revision")
    try:
        top = find_repo(rev, repo)
    except BaseTreeError:
        carried = _carried(rev, repo, store)
        if carried is None:
            raise
        return carried
    r = _git(["rev-parse", "--verify", f"{rev}^{{commit}}"], top, rev)
    if r.returncode != 0:
        # a copy of the tree whose git folder lacks the commit (the device tool ships one without the newest
        # objects): the tree materialized beforehand and carried along still serves
        carried = _carried(rev, repo, store)
        if carried is not None:
            return carried
        raise BaseTreeError(f"base revision {rev!r}: not a commit in {top} (git: {_one_line(_text(r.stderr))})")
    sha = _text(r.stdout)
    short = _text(_git(["rev-parse", "--short=7", sha], top, rev).stdout) or sha[:7]
    if _git(["cat-file", "-e", f"{sha}:src/{PACKAGE}/__init__.py"], top, rev).returncode != 0:
        raise BaseTreeError(
            f"base revision {rev!r} ({short}) has no src/{PACKAGE}/__init__.py: a layout --base cannot import"
        )
    if store is None:
        store = top / ".tritonkit"
        store.mkdir(exist_ok=True)
        # ignored in any checkout, whatever its .gitignore says (as .pytest_cache does)
        if not (store / ".gitignore").exists():
            (store / ".gitignore").write_text("*\n")
    store = Path(store)
    root = _materialize(top, sha, store / "base", rev)
    return BaseTree(rev=rev, sha=sha, short=short, root=root, store=store)


def _carried(rev: str, repo: Path | None, store: Path | None) -> BaseTree | None:
    """Without a git checkout (a copy of the tree on a GPU machine), a tree materialized beforehand and carried
    along: ``<store>/base/<sha>/`` whose sha starts with ``rev`` (a sha or its prefix)."""
    if not re.fullmatch(r"[0-9a-f]{7,40}", rev):
        return None
    if store is None:
        top = Path(repo) if repo is not None else Path(__file__).resolve().parents[3]
        store = top / ".tritonkit"
    found = [d for d in (Path(store) / "base").glob(f"{rev}*") if _complete(d, d.name)]
    if len(found) != 1:
        return None
    sha = found[0].name
    return BaseTree(rev=rev, sha=sha, short=sha[:7], root=found[0], store=Path(store))


def _complete(folder: Path, sha: str) -> bool:
    try:
        return (folder / MARKER).read_text().strip() == sha
    except OSError:
        return False


def _sweep(base: Path) -> None:
    """Remove what killed runs left: set-aside partial trees, and extractions older than ``_STALE_S``."""
    now = time.time()
    for p in base.glob(".*-*"):
        try:
            old = now - p.lstat().st_mtime > _STALE_S
        except OSError:
            continue
        if p.name.startswith(".trash-") or (p.name.startswith(".tmp-") and old):
            shutil.rmtree(p, ignore_errors=True)


def _extract(top: Path, sha: str, dest: Path, rev: str) -> None:
    r = _git(["archive", "--format=tar", sha, "src"], top, rev)
    if r.returncode != 0:
        raise BaseTreeError(f"base revision {rev!r}: git archive failed ({_one_line(_text(r.stderr))})")
    with tarfile.open(fileobj=io.BytesIO(r.stdout), mode="r:") as tf:
        # the "data" filter refuses links out of the tree and absolute paths (Python >= 3.10.12)
        tf.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def _materialize(top: Path, sha: str, base: Path, rev: str) -> Path:
    """``base/<sha>``, complete. Extracted into a temporary folder, marked, then renamed into place: the rename is
    atomic, so a racing run either wins or finds the winner's tree, and a killed one leaves only a ``.tmp-`` folder.
    A ``<sha>`` folder without the marker (left by something else) is set aside and redone."""
    final = base / sha
    if _complete(final, sha):
        return final
    base.mkdir(parents=True, exist_ok=True)
    _sweep(base)
    if final.exists() and not _complete(final, sha):
        trash = Path(tempfile.mkdtemp(prefix=f".trash-{sha[:12]}-", dir=base))
        try:
            os.rename(final, trash / sha)
        except FileNotFoundError:  # another run set it aside first
            pass
        shutil.rmtree(trash, ignore_errors=True)
    tmp: Path | None = Path(tempfile.mkdtemp(prefix=f".tmp-{sha[:12]}-", dir=base))
    try:
        _extract(top, sha, tmp, rev)
        (tmp / MARKER).write_text(sha + "\n")
        try:
            os.rename(tmp, final)
            tmp = None
        except OSError:
            if not _complete(final, sha):
                raise
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


# --- importing a tree under an alias ------------------------------------------------------------------------------


def _renamer(alias: str) -> list[tuple[re.Pattern, Any]]:
    return [
        (re.compile(r"\btorch\.ops\.tritonkit\b"), f"torch.ops.{alias}"),
        (re.compile(r"""(?<=["'])tritonkit::"""), f"{alias}::"),
        (re.compile(r"""(\bLibrary\(\s*["'])tritonkit(?=["'])"""), lambda m: m.group(1) + alias),
    ]


def _rename(name: str, alias: str) -> str:
    if name == PACKAGE or name.startswith(PACKAGE + "."):
        return alias + name[len(PACKAGE) :]
    return name


def _alias_builtins(alias: str) -> dict:
    """A builtins namespace whose ``__import__`` maps absolute ``tritonkit[.x]`` imports to the alias and hands out
    an ``importlib`` whose ``import_module`` does the same."""
    shim = types.ModuleType("importlib", "importlib, with import_module('tritonkit.x') mapped to the base alias")

    def import_module(name: str, package: str | None = None):
        return importlib.import_module(_rename(name, alias), package)

    shim.import_module = import_module
    shim.__getattr__ = lambda attr: getattr(importlib, attr)

    def __import__(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0:
            if name.partition(".")[0] == "importlib":
                mod = builtins.__import__(name, globals, locals, fromlist, level)
                return shim if not fromlist or name == "importlib" else mod
            name = _rename(name, alias)
        return builtins.__import__(name, globals, locals, fromlist, level)

    ns = dict(builtins.__dict__)
    ns["__import__"] = __import__
    return ns


class _AliasLoader(importlib.machinery.SourceFileLoader):
    """Loads a module of the alias package: the op namespace renamed in the source, the alias builtins installed."""

    def __init__(self, fullname: str, path: str, alias: str, ns: dict):
        super().__init__(fullname, path)
        self._alias, self._ns = alias, ns

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        source = importlib.util.decode_source(self.get_data(path))
        for pattern, repl in _renamer(self._alias):
            source = pattern.sub(repl, source)
        return compile(source, path, "exec", dont_inherit=True)

    def exec_module(self, module):
        module.__dict__["__builtins__"] = self._ns
        super().exec_module(module)


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Claims the alias packages' modules (and nothing else), so every one of them goes through _AliasLoader."""

    def __init__(self):
        self.trees: dict[str, tuple[Path, dict]] = {}

    def find_spec(self, fullname, path=None, target=None):
        alias = fullname.partition(".")[0]
        if alias not in self.trees:
            return None
        pkg_dir, ns = self.trees[alias]
        if fullname == alias:
            init = pkg_dir / "__init__.py"
            return importlib.util.spec_from_file_location(
                alias, init, loader=_AliasLoader(alias, str(init), alias, ns), submodule_search_locations=[str(pkg_dir)]
            )
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _AliasLoader(fullname, spec.origin, alias, ns)
        return spec


_FINDER = _AliasFinder()
_LOCK = threading.RLock()


def _forget(alias: str) -> None:
    for name in [n for n in sys.modules if n == alias or n.startswith(alias + ".")]:
        del sys.modules[name]


@dataclasses.dataclass(frozen=True)
class BaseTree:
    """A materialized revision. ``root`` holds its ``src/``; ``store`` is the ``.tritonkit`` folder it lives in."""

    rev: str
    sha: str
    short: str
    root: Path
    store: Path

    @property
    def label(self) -> str:
        return f"base@{self.short}"

    @property
    def alias(self) -> str:
        """The top-level name the tree's package imports under."""
        return f"{PACKAGE}_base_{self.sha[:12]}"

    def import_package(self) -> types.ModuleType:
        """The tree's ``tritonkit`` imported as :attr:`alias` (once per process), its ``ops`` with it. Raises
        :class:`BaseTreeError` if that fails or the tree has no ``ops.get_spec``; a failed import leaves no alias
        module behind (ops it registered stay registered, so a second try can fail on them)."""
        alias = self.alias
        with _LOCK:
            if alias in sys.modules and hasattr(sys.modules[alias], "ops"):
                return sys.modules[alias]
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            _FINDER.trees[alias] = (self.root / "src" / PACKAGE, _alias_builtins(alias))
            try:
                pkg = importlib.import_module(alias)
                ops = importlib.import_module(f"{alias}.ops")
            except ModuleNotFoundError as e:
                _forget(alias)
                if e.name == f"{alias}.ops":
                    raise BaseTreeError(
                        f"{self.label} ({self.rev}) has no {PACKAGE}.ops package: too old for --base"
                    ) from e
                raise BaseTreeError(
                    f"{self.label} ({self.rev}): importing its {PACKAGE} failed: {type(e).__name__}: {e}"
                ) from e
            except Exception as e:
                _forget(alias)
                raise BaseTreeError(
                    f"{self.label} ({self.rev}): importing its {PACKAGE} failed: "
                    f"{_one_line(f'{type(e).__name__}: {e}')}"
                ) from e
            if not callable(getattr(ops, "get_spec", None)):
                _forget(alias)
                raise BaseTreeError(f"{self.label} ({self.rev}): its {PACKAGE}.ops has no get_spec: too old for --base")
            return pkg

    def module(self, name: str) -> types.ModuleType:
        """A module of the tree: ``module("ops._launch")`` or ``module("tritonkit.ops._launch")``."""
        self.import_package()
        name = name if name == PACKAGE or name.startswith(PACKAGE + ".") else f"{PACKAGE}.{name}"
        return importlib.import_module(_rename(name, self.alias))

    def get_spec(self, op_name: str):
        """The tree's OpSpec of ``op_name``: an instance of the tree's own OpSpec class (duck-typed like the running
        one), whose ``fn`` runs the tree's kernels. An op the tree lacks raises :class:`BaseTreeError`."""
        ops = self.import_package().ops
        try:
            return ops.get_spec(op_name)
        except Exception as e:
            raise BaseTreeError(f"{self.label} ({self.rev}): {_one_line(f'{type(e).__name__}: {e}')}") from e

    def cache_dir(self, gpu_name: str) -> Path:
        """``<store>/base-results/<sha>/<gpu slug>/``, created: where this revision's timings on that GPU are kept."""
        d = self.store / "base-results" / self.sha / gpu_slug(gpu_name)
        d.mkdir(parents=True, exist_ok=True)
        return d


def gpu_slug(name: str) -> str:
    """``"NVIDIA H200"`` -> ``"nvidia-h200"``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-gpu"


# --- cached base results --------------------------------------------------------------------------------------------


def point_key(record: Mapping[str, Any]) -> tuple[str, str, str]:
    """(op, dtype, shape id) of a point record: ``record["op"]``, ``record["dtype"]`` (the name the bench writes,
    ``"bfloat16"``) and ``record["shape"]`` (a dict of sizes, keyed in sorted order, or a string as it is)."""
    shape = record["shape"]
    if isinstance(shape, Mapping):
        shape = ",".join(f"{k}={shape[k]}" for k in sorted(shape))
    return str(record["op"]), str(record["dtype"]), str(shape)


def load_points(path: Path, meta: Mapping[str, Any] | None = None) -> dict[tuple[str, str, str], dict]:
    """``{point_key: record}`` saved at ``path``. A missing, unreadable or foreign file, or one saved with other
    ``meta`` (when ``meta`` is given: torch/Triton versions, timing options), is an empty cache, never an error."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("format") != POINTS_FORMAT or (meta is not None and data.get("meta") != dict(meta)):
            return {}
        return {point_key(r): r for r in data["points"]}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def save_points(path: Path, records: Iterable[Mapping[str, Any]], meta: Mapping[str, Any] | None = None) -> None:
    """Write ``records`` (plain JSON-able dicts, each with ``op``, ``dtype`` and ``shape``; the last of one key wins)
    and ``meta`` to ``path`` atomically, replacing what it held: merge with :func:`load_points` first to keep it."""
    by_key: dict[tuple[str, str, str], dict] = {}
    for r in records:
        try:
            by_key[point_key(r)] = dict(r)
        except KeyError as e:
            raise ValueError(f"a base point record needs 'op', 'dtype' and 'shape'; this one lacks {e}") from None
    text = json.dumps({"format": POINTS_FORMAT, "meta": dict(meta or {}), "points": list(by_key.values())}, indent=1)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
