"""A case file whose import fails: the checker reports it by name and goes on with the other files."""

import tritonkit_no_such_module  # noqa: F401
