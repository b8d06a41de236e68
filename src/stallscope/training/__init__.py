"""Data stalls inside a real training loop: `ss.watch` (`watch`) records per-step data wait and
compute, samples the prefetch buffer, GPU and CPU in the background (`sampling`), writes through one
small sink protocol (`sinks`: log, TensorBoard, JSONL, CSV, or none) and is summarised by pure
functions (`summary`); `runner` is the `profile` command's loop over the target's `train_step`.
"""
