"""The decision thresholds more than one module reads, each in one place with why it has its value.

A threshold read by a single rule lives beside that rule (the slow-sample outlier factors in
``checks/rules.py``, the memory-growth minimums in ``growth.py``, the race's stopping
rules in ``tuning/confidence.py``); the ones here are shared, between probes and analysis or
between several rules, so that a report and the code that measured it cannot disagree.

This module imports nothing from stallscope: probes, analysis and renderers may all import it.
``tests/unit/test_thresholds.py`` fails if one of these numbers is written out anywhere else.
"""

from __future__ import annotations

# -- Noise and ties between two loaders ---------------------------------------------------------

# Two rates closer than this fraction are a tie: the final race keeps the cheaper config, a climb
# step must gain more to count, and a report calls a knob effect or a faster sweep config real only
# beyond it; 3% is about how far apart two measurements of one config land on a quiet machine
# (NOTE [what the confidence states] in tuning/confidence.py).
TIE_MARGIN = 0.03

# The confidence the tuner's race stops at and the level of the intervals ``compare`` states: a
# claim is made at 95%, the level benchmarks/confidence_calibration.py checks against.
CONFIDENCE_LEVEL = 0.95

# -- Training loops: is the loader the bottleneck? ----------------------------------------------

# A steady-state data-wait share of the step time at or above this makes a run ``input-bound``
# and fails the checklist's pass boundary: at 15% the loader costs at least ~18% of the run
# (what-if speed-up >= 1.18x), enough to be worth fixing the input pipeline first.
INPUT_BOUND_AT = 0.15

# Below this data-wait share a run is ``compute-bound``: a faster loader would gain under ~5%,
# less than the run-to-run noise of most training steps.
COMPUTE_BOUND_BELOW = 0.05

# The rate per epoch, start-ups included, decides between configs (the tuner's race, the sweep's
# fastest) once an epoch start takes this share of some config's epoch (NOTE [per-epoch rate] in
# tuning/epoch_cost.py): below it, start-up moves a loop's rate less than the race's noise does.
EPOCH_SHARE = 0.05

# Worker start-up (the first batch of an epoch) costing at least this share of an epoch is worth
# advice and fails the checklist's pass boundary: 5% of every epoch is worth a one-line change
# (persistent_workers=True, a cheaper dataset __init__).
STARTUP_SHARE_NOTABLE = 0.05

# -- Memory -------------------------------------------------------------------------------------

# The share of available RAM the tuner allows for workers + in-flight batches (tf.data's
# ram_budget idea), that a prefix cache may take, and the checklist's RAM pass boundary: half,
# so that the model, the framework and the rest of the machine keep the other half.
MEMORY_BUDGET_SHARE = 0.5

# In-flight batches over this share of free /dev/shm earn the shm-too-small warning and fail the
# checklist's pass boundary: past half, a second loader or a larger batch exhausts it (a bus error).
SHM_WARN_FRACTION = 0.5
