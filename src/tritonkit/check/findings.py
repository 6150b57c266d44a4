"""What the checker reports: findings (a rule fired) and problems (something could not be checked)."""

from __future__ import annotations

import dataclasses
from typing import Any

SEVERITIES = ("error", "warning", "info")


@dataclasses.dataclass
class Finding:
    rule: str
    severity: str
    kernel: str
    file: str
    line: int
    message: str
    case: dict[str, Any]
    fix: str = ""
    col: int = 0
    #: distinguishes two findings of one rule on one line (the grid dimension, the load's line)
    tag: str = ""
    #: the same finding seen again (other compiles, other cases): how many times in all
    count: int = 1
    #: the reason a ``# tritonkit: ignore[rule]`` comment on the line gives (None: not suppressed)
    suppressed: str | None = None
    #: listed in the baseline the run was given
    baseline: bool = False

    @property
    def active(self) -> bool:
        """Counts toward the exit code: neither suppressed nor in the baseline."""
        return self.suppressed is None and not self.baseline

    def key(self) -> tuple:
        return (self.rule, self.kernel, self.file, self.line, self.tag)

    def as_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "kernel": self.kernel,
            "file": self.file,
            "line": self.line,
            "message": self.message,
            "case": self.case,
            "fix": self.fix,
            "suppressed": self.suppressed is not None,
            "justification": self.suppressed,
            "baseline": self.baseline,
        }


@dataclasses.dataclass
class Problem:
    """kind: import | case | capture | compile | ir | baseline. ``fatal`` problems mean part of the code went unchecked
    (exit code 2 when no finding already makes it 1); ``ir`` notes name a construct the analysis skipped."""

    kind: str
    where: str
    message: str
    fatal: bool = True

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "where": self.where, "message": self.message, "fatal": self.fatal}
