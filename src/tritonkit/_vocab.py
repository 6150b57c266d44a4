"""Words and numbers every part of tritonkit uses, in one place (importable without torch or Triton).

- The shape spaces an OpSpec declares and the tools walk: ``SHAPE_SPACES``.
- SM counts where no device answers: the card each compute capability's major stands for (the checker's stub
  device, meta tensors, the interpreter), and the H200's for a rule that must stay pure in shapes.
"""

from __future__ import annotations

#: boundary (edges: 1 token, odd widths, block edges), sweep (the num_tokens sweep of each model), large (past
#: 2^31 elements: 64-bit offsets)
SHAPE_SPACES = ("boundary", "sweep", "large")

#: SMs of the card a compute capability's major stands for: A100 108, H100/H200 132, B200 148
SMS_BY_MAJOR = {8: 108, 9: 132, 10: 148}
#: the H200's, where nothing else says: what the tuned rules were measured on
DEFAULT_SMS = SMS_BY_MAJOR[9]


def sms_of_major(major: int) -> int:
    """The SM count :data:`SMS_BY_MAJOR` gives a compute capability's major (:data:`DEFAULT_SMS` for others)."""
    return SMS_BY_MAJOR.get(major, DEFAULT_SMS)
