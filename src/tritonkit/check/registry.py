"""The rules, registered once: the module of each, in report order.

A rule is its module in ``check/rules/``: ``RULE`` (id, severity, title, why) and ``check(ctx)``; its page is
``check/docs/<id>.md``. Adding a rule is adding its module name here; ``tests/check/test_corpus.py`` then requires
its page, and its seeded bug and fixed twin in ``tests/check/rules/<module>/``. The ids are read from the modules'
source here so that ``--help`` lists them without importing Triton.
"""

from __future__ import annotations

import ast
from pathlib import Path

MODULES = (
    "grid_limit",
    "int32_offset",
    "store_then_load",
    "load_then_store",
    "recompile",
    "int_division_sign",
    "low_precision",
    "autotune_cost",
)

_RULES_DIR = Path(__file__).parent / "rules"


def _declared_id(module: str) -> str:
    """The id in the module's ``RULE = RuleInfo("<id>", ...)``, read without importing it."""
    tree = ast.parse((_RULES_DIR / f"{module}.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["RULE"]
            and isinstance(node.value, ast.Call)
            and node.value.args
            and isinstance(node.value.args[0], ast.Constant)
        ):
            return str(node.value.args[0].value)
    raise RuntimeError(f"check/rules/{module}.py declares no RULE = RuleInfo('<id>', ...)")


def rule_ids() -> tuple[str, ...]:
    return tuple(_declared_id(m) for m in MODULES)
