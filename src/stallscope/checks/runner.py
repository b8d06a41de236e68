"""``ss.check``: run the probes within a time budget, then the rules.

Order matters: the picklability probe runs first (it decides whether worker
probes can use spawn/forkserver), then the sample-health probe (its own pool:
it survives hangs and names the bad indices), then the DataLoader-based RNG and
memory probes, which leave out the indices the health probe found broken so
they do not stall on them. Every probe gets a deadline carved from the total
budget; every wait on a worker is bounded (NOTE [worker shutdown] in
``runtime/processes.py``).

NOTE [check coverage]
A sampled check used to fetch a fixed 512 indices, a quarter of a 2,000-item
dataset in 4 s of a 60 s budget, and missed the three slow samples in it. Now
the sample-health probe fetches a pilot (the two ends and indices spread over
the range), measures how many items per second its pool fetches, and then
plans: every remaining index if they fit in its share of the budget, else as
many as fit, one per stratum of the index range, in random order so a run cut
short stays spread out. The memory probe prefers indices the health probe did
not reach; its fetches are timed too and count toward the coverage, which the
report always states ("n of N indices").
"""

from __future__ import annotations

import multiprocessing
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..runtime.processes import default_start_method, no_orphans
from .check_run import CheckRun
from .findings import codes_of_probe as codes_of_probe
from .findings import select_codes
from .result import CheckResult

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_BUDGET_S = 60.0

# The earlier private name of the class, still imported by tests.
_Run = CheckRun


def check(
    target: Any,
    *,
    batch_size: int | None = None,
    collate: Any = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    budget: float | None = DEFAULT_BUDGET_S,
    full: bool = False,
    num_workers: int | None = None,
    start_method: str | None = None,
    only: Iterable[str] | None = None,
    skip: Iterable[str] | None = None,
    seed: int = 0,
    shm_free_bytes: int | None = None,
    progress: Callable[[str, int | None, int | None], None] | None = None,
    on_update: Callable[[CheckResult], None] | None = None,
) -> CheckResult:
    """Worker-safety, memory and sample-health checks (SPEC §4) on a pipeline.

    ``target`` is anything :func:`stallscope.load_target` accepts (a TARGET
    string, a Dataset, a DataLoader, a dict, a zero-argument factory) or a
    ``Pipeline``. ``timeout`` bounds each sample's fetch, ``budget`` the whole
    call (None: no limit besides the per-sample timeouts). Sampled by default
    (``SAMPLE_SIZE`` indices); ``full=True`` fetches every index.
    ``num_workers`` (default ``min(2, usable cores)``) and ``start_method``
    (default: the loader's own, else the platform's) shape the worker probes.
    ``only``/``skip`` select finding codes. ``shm_free_bytes`` replaces the
    measured free space of /dev/shm (to ask "would this fit in a 64 MB
    container?"). ``progress(stage, done, total)`` and ``on_update(result)``
    report as the probes go; the result so far is complete at every update.
    """
    from ..runtime.host import usable_cores
    from ..target import Pipeline, load_target

    if timeout is None or timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {timeout}.")
    if budget is not None and budget <= 0:
        raise UsageError(f"--budget must be a positive number of seconds, not {budget}.")
    if num_workers is not None and num_workers < 1:
        raise UsageError(
            f"--num-workers must be at least 1 for the worker probes, not {num_workers}."
        )
    if start_method is not None and start_method not in multiprocessing.get_all_start_methods():
        raise UsageError(
            f"start method {start_method!r} is not available here; choose one of "
            f"{', '.join(multiprocessing.get_all_start_methods())}."
        )
    codes = select_codes(only, skip)
    pipeline = (
        target
        if isinstance(target, Pipeline)
        else load_target(target, batch_size=batch_size, collate=collate)
    )
    if pipeline.dataset is None:  # a graph or pool pipeline: NOTE [pipeline checks]
        from .pipeline_checks import check_pipeline

        return check_pipeline(
            pipeline,
            codes=codes,
            timeout=float(timeout),
            budget=float(budget) if budget is not None else 120.0,
            progress=progress,
            on_update=on_update,
        )
    length = pipeline.length()
    if length == 0:
        raise UsageError("the dataset is empty (len(dataset) == 0): there is nothing to check.")
    workers = num_workers or min(2, usable_cores())
    method = start_method or pipeline.baseline.multiprocessing_context or default_start_method()
    with no_orphans(), tempfile.TemporaryDirectory(prefix="stallscope-check-") as tmp:
        run = CheckRun(
            pipeline,
            codes=codes,
            timeout=float(timeout),
            budget=float(budget) if budget is not None else float("inf"),
            full=full,
            num_workers=workers,
            start_method=method,
            seed=seed,
            shm_free_bytes=shm_free_bytes,
            workdir=Path(tmp),
            progress=progress,
            on_update=on_update,
        )
        return run.run()
