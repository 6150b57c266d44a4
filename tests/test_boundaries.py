"""The package boundaries CONTRIBUTING states, read from the source: no module reaches an underscore name (or an
underscore module) of another package, the modules import one another without cycles, and ``ops`` imports no tool.

Owners: a module under ``ops/<op>/`` belongs to that op's folder, any other to its top-level package (``ops``,
``bench``, ``check``, ...). A module may use the private names of its own owner and of the packages above it
(``ops/rms_norm/api.py`` uses ``ops/_checks``; everything may use ``tritonkit/_env``), never of a sibling or a
package below it.

Inside ``check/`` the folders are layers, each importing only those below it: ``ir`` (reading TTIR) < ``capture``
(running cases, recording launches) < ``analysis`` < ``rules``. The driver at the top of ``check/`` may import any
of them; a folder may import from the top only the two leaves every layer speaks in, ``findings`` and ``registry``.
"""

import ast
import pathlib

import tritonkit

PACKAGE = pathlib.Path(tritonkit.__file__).parent
TOOLS = ("check", "testing", "bench", "tune")
#: check/'s folders, lowest first: a module may import its own folder and those before it
LAYERS = ("ir", "capture", "analysis", "rules")
#: check/'s top: the driver (may import every folder) and the leaves the folders may import
DRIVER = {"cli", "runner", "report", "adopt", "progress", "resources"}
LEAVES = {"findings", "registry"}


def _module_name(path: pathlib.Path) -> str:
    parts = ["tritonkit", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_package(name: str) -> bool:
    return MODULES.get(name, pathlib.Path()).name == "__init__.py"


def _owner(name: str) -> str:
    parts = name.split(".")
    if len(parts) >= 3 and parts[1] == "ops" and _is_package(".".join(parts[:3])):
        return ".".join(parts[:3])  # an op's folder
    if len(parts) >= 2 and _is_package(".".join(parts[:2])):
        return ".".join(parts[:2])  # a top-level package: ops, bench, check, testing, tune
    if len(parts) == 2 and not _private(parts[1]):
        return name  # a public root module: spec, models, cli
    return "tritonkit"  # the package itself and its private root modules (_env, _imports), shared by all


def _may_use_privates_of(user: str, target: str) -> bool:
    """Whether ``user`` may reach ``target``'s underscore names: target's owner is user's owner or above it."""
    mine, theirs = _owner(user), _owner(target)
    return mine == theirs or mine.startswith(theirs + ".") or theirs == "tritonkit"


def _resolve(user: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = user.split(".") if _is_package(user) else user.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name: str, tree: ast.AST):
    """``(line, imported module, name bound or None, the from-imported attribute or None)`` for every import of a
    tritonkit module, at any depth (an import inside a function is still a dependency)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("tritonkit"):
                    yield node.lineno, a.name, a.asname, None
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(name, node)
            if not mod.startswith("tritonkit"):
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                if sub in MODULES:
                    yield node.lineno, sub, a.asname or a.name, None
                else:
                    yield node.lineno, mod, None, a.name


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(name: str, tree: ast.AST) -> list[str]:
    found, aliases = [], {}
    for line, mod, bound, attr in _imports(name, tree):
        module_parts = mod.split(".")[1:]
        if any(_private(p) for p in module_parts) and not _may_use_privates_of(name, mod):
            found.append(f"{name}:{line} imports the private module {mod}")
        if attr is not None and _private(attr) and not _may_use_privates_of(name, mod):
            found.append(f"{name}:{line} imports {mod}.{attr}")
        if bound is not None:
            aliases[bound] = mod
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _private(node.attr)
            and not _may_use_privates_of(name, aliases[node.value.id])
        ):
            found.append(f"{name}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    return found


def private_uses() -> list[str]:
    return [u for name, path in sorted(MODULES.items()) for u in _private_uses(name, ast.parse(path.read_text()))]


def import_graph() -> dict[str, set[str]]:
    """Module -> the tritonkit modules it imports, leaving out the packages above it (importing a submodule runs
    them first anyway)."""
    graph = {}
    for name, path in MODULES.items():
        deps = {mod for _, mod, _, _ in _imports(name, ast.parse(path.read_text()))}
        graph[name] = {d for d in deps if d in MODULES and d != name and not name.startswith(d + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_reaches_another_packages_private_names():
    assert private_uses() == []


def test_the_checker_of_private_names_sees_a_back_door():
    code = (
        "from tritonkit.ops.rms_norm import api as _rms\nfrom tritonkit.ops._checks import tensor\n"
        "from tritonkit.ops.fused_moe.api import _forward\n_rms._launch()\n_rms.check_args()\n"
    )
    found = _private_uses("tritonkit.bench.fake", ast.parse(code))
    assert found == [
        "tritonkit.bench.fake:2 imports the private module tritonkit.ops._checks",
        "tritonkit.bench.fake:3 imports tritonkit.ops.fused_moe.api._forward",
        "tritonkit.bench.fake:4 uses tritonkit.ops.rms_norm.api._launch",
    ]
    # an op's folder may use the ops package's helpers, not another op's privates
    assert _private_uses("tritonkit.ops.silu_and_mul.vllm", ast.parse("from .. import _checks\n")) == []
    assert _private_uses(
        "tritonkit.ops.fused_moe.peers", ast.parse("from ..silu_and_mul import api\napi._forward()\n")
    ) == ["tritonkit.ops.fused_moe.peers:2 uses tritonkit.ops.silu_and_mul.api._forward"]


def test_modules_import_one_another_without_cycles():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert "tritonkit.ops.fused_moe.api" in graph["tritonkit.ops.fused_moe.peers"]


def test_ops_import_no_tool():
    bad = [
        f"{name} imports {dep}"
        for name, deps in import_graph().items()
        if name.startswith("tritonkit.ops")
        for dep in deps
        if dep.split(".")[1] in TOOLS
    ]
    assert bad == []


def _check_place(name: str) -> str | None:
    """The folder of a module of check/ (``ir``, ..., ``rules``), the top-level module's name, or None outside."""
    parts = name.split(".")
    if parts[:2] != ["tritonkit", "check"] or len(parts) == 2:
        return None
    return parts[2]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports inside check/ that go up a layer: a folder importing a later folder or the driver, or a leaf
    importing anything of check/."""
    bad = []
    for name, deps in sorted(graph.items()):
        mine = _check_place(name)
        if mine is None or mine in DRIVER:
            continue
        for dep in sorted(deps):
            theirs = _check_place(dep)
            if theirs is None or theirs == mine:
                continue
            if mine in LEAVES:
                bad.append(f"{name} imports {dep}: {mine} is a leaf every layer imports")
            elif theirs in LAYERS and LAYERS.index(theirs) > LAYERS.index(mine):
                bad.append(f"{name} imports {dep}: {mine}/ sits below {theirs}/")
            elif theirs not in LAYERS and theirs not in LEAVES:
                bad.append(f"{name} imports {dep}: {mine}/ may not import the driver")
    return bad


def test_check_folders_import_only_the_layers_below_them():
    assert layer_violations(import_graph()) == []


def test_every_module_of_check_is_in_a_folder_or_named_at_the_top():
    # a module added flat at the top of check/ fails here until it picks its layer
    places = {_check_place(n) for n in MODULES} - {None}
    assert places == set(LAYERS) | DRIVER | LEAVES


def test_the_layer_checker_sees_an_import_going_up():
    graph = {
        "tritonkit.check.ir.mlir": {"tritonkit.check.analysis.ranges"},
        "tritonkit.check.capture.launches": {"tritonkit.check.ir.mlir", "tritonkit.check.findings"},
        "tritonkit.check.analysis.memory": {"tritonkit.check.capture.launches", "tritonkit.check.runner"},
        "tritonkit.check.rules.recompile": {"tritonkit.check.analysis.memory", "tritonkit.check.registry"},
        "tritonkit.check.findings": {"tritonkit.check.ir.mlir"},
        "tritonkit.check.runner": {"tritonkit.check.rules", "tritonkit.check.cli"},
    }
    assert layer_violations(graph) == [
        "tritonkit.check.analysis.memory imports tritonkit.check.runner: analysis/ may not import the driver",
        "tritonkit.check.findings imports tritonkit.check.ir.mlir: findings is a leaf every layer imports",
        "tritonkit.check.ir.mlir imports tritonkit.check.analysis.ranges: ir/ sits below analysis/",
    ]
