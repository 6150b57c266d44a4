"""``tritonkit tune OP --model NAME``: build an op's tile-config table on the card it runs on.

Only the ops whose kernels are matmul-like get tables (the guide's rule: autotune where it pays). The tuner times
with the bench's rules (CUDA-graph replays, a cold L2), compiles candidate configs in parallel worker processes
first so the timing loop only loads them, writes its progress after each bucket so an interrupted run resumes, and
writes the table where the op's config lookup reads it.
"""

TUNABLE = {"fused_moe": "tritonkit.tune.fused_moe"}
