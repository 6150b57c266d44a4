"""``tritonkit bench`` and ``tritonkit inductor``: decode-to-prefill sweeps against the card's measured ceilings.

Modules, one responsibility each:
``runner``      the sweep: points of every series, per point the inputs, each provider's check and timing.
``providers``   what is timed: tritonkit, eager, Inductor, vLLM, SDPA, a base revision; the correctness check.
``timing``      CUDA-graph and eager timing over rotating input sets (and the rotation rule), host overhead.
``ceilings``    the card's copy bandwidth, matmul rate and launch floor, measured and cached per GPU and driver.
``roofline``    what a point is judged against: ideal time, target, % of ceiling (pure arithmetic).
``stats``       statistics of timings: per-call summaries, geomean, repeats for a budget (pure).
``records``     the typed results (PointResult, OpResult, Results), their JSON, the recorded table per GPU.
``report``      run metadata, terminal tables, summary, progress bar.
``compare``     per-point ratios of two runs; ``plot`` one PNG per op.
``base``        another git revision's tritonkit imported beside this one (``--base REV``).
``startup``     time to a first correct result in fresh processes; ``cli`` and ``inductor_cli`` the commands.
Nothing heavy is imported here: the startup child's clock starts before torch is imported.
"""
