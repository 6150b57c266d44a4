"""The IR walks' budgets: none cuts a walk over the rule cases, and each one, once too small, leaves a note naming
it. Runs in a fresh process: the budgets are lowered there, where the check itself runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tritonkit.check.analysis import budgets

CASES = Path(__file__).parent / "rule_cases"

PROBE = """
import json, sys
from tritonkit.check import Options, run_check
from tritonkit.check.analysis import budgets

def notes(rep):
    return sorted({p.message.split("`")[1] for p in rep.problems
                   if p.kind == "ir" and not p.fatal and "budgets.py" in p.message})

out = {"default": notes(run_check([sys.argv[1]], Options()))}
for b in budgets.ALL:
    old, b.limit = b.limit, -1
    try:
        out[b.name] = notes(run_check([sys.argv[1]], Options()))
    finally:
        b.limit = old
print(json.dumps(out))
"""


def test_each_budget_that_cuts_a_walk_leaves_a_note_and_none_cuts_by_default(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITONKIT_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", PROBE, str(CASES)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    noted = json.loads(r.stdout.splitlines()[-1])
    assert noted.pop("default") == []
    assert noted == {b.name: [b.name] for b in budgets.ALL}


def test_budgets_are_named_once():
    names = [b.name for b in budgets.ALL]
    assert len(set(names)) == len(names) and all(b.limit > 0 for b in budgets.ALL)
    public = {v for k, v in vars(budgets).items() if isinstance(v, budgets.Budget) and k.isupper()}
    assert public == set(budgets.ALL)
