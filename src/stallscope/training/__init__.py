"""Data stalls inside a real training loop: `ss.watch` (`watch`) records per-step data wait and
compute, samples the prefetch buffer, GPU and CPU in the background (`sampling`), writes through one
small sink protocol (`sinks`: log, TensorBoard, JSONL, CSV, or none) and is summarised by pure
functions (`summary`); `runner` is the `profile` command's loop over the target's `train_step`.
"""

# The profile command's defaults, here so that ``stallscope profile --help`` states them without
# importing the loop (and torch): the steps measured, and the fewest warm-up steps (allocator,
# lazy initialisation, autotuning), even at num_workers=0 (``runner.default_warmup``).
DEFAULT_STEPS = 50
MIN_WARMUP = 5
