"""``check`` on a pipeline that is not a Dataset in a DataLoader (a ``torchdata.nodes`` graph, a
thread-pool or process-pool pipeline, any iterable of batches).

NOTE [pipeline checks]
The per-index probes need a ``__getitem__`` to call; such a pipeline has none,
so it is checked as it runs: a fresh copy (``kind.build``) is iterated epoch
after epoch in a thread of stallscope's, as the user iterates it, within the
check's budget.

* memory-growth: at each epoch's end the memory of the whole process tree is
  read: the main process (the pipeline's threads live in it) and every
  process it started, at any depth (a mapper's worker processes, a pool's),
  USS where the platform gives it (pages only that process holds, so memory
  shared between them counts once), else RSS. The first epoch fills caches
  and is the baseline; the rule (``tree_memory.py``) flags memory that rises
  at every later epoch end. A stream whose first epoch does not end within a
  quarter of the budget is read every ``batches_per_reading`` batches instead,
  and the finding says so.
* hang: a batch that does not arrive within ``timeout`` is a hang; the
  stack of the thread that waits for it says where.
* getitem-error: an exception the pipeline raises while iterating.

The rest cannot run on such a pipeline and say why (``NOT_RUN``). A DataLoader with automatic
batching off (its sampler yields what ``__getitem__`` takes, not integer indices) is checked the
same way, and says that is why (``NOT_BY_INDEX``).
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

import psutil

from ..errors import describe_exception
from ..pipeline.kinds import close_trial
from ..pipeline.structure import batch_length
from ..runtime.processes import descendants, own_memory_mb
from .findings import ERROR, Finding, sort_findings
from .result import CheckResult
from .tree_memory import detect_tree_memory_growth

MAX_EPOCHS = 8
MIN_EPOCHS = 4  # epoch ends read before the budget may stop the probe
_END = object()

NOT_RUN: dict[str, str] = {
    "unpicklable": (
        "the pipeline's stages are not pickled by a DataLoader: a thread pool never pickles, "
        "and a process mapper pickles its function when it starts its processes, where the "
        "iteration above would have raised it"
    ),
    "duplicate-rng": (
        "the pipeline's workers are its own, seeded by the pipeline and not by a DataLoader's "
        "worker_init_fn, so stallscope cannot draw from each worker's random stream"
    ),
    "iterable-duplicates": (
        "the items of a graph or pool pipeline do not say which worker made them, so streams "
        "read twice cannot be told apart from samples that repeat"
    ),
    "copy-on-write": "it needs DataLoader workers forked from the main process, read one by one",
    "slow-samples": "the pipeline has no indices to fetch one at a time",
    "collate-error": "the pipeline batches items itself; its errors are reported as raised",
    "shm-too-small": "the pipeline does not pass batches through a DataLoader's shared memory",
    "oversubscription": "it is read from DataLoader workers' thread settings",
}
# A DataLoader whose sampler yields what ``__getitem__`` takes (automatic batching off) is checked
# as it runs too: its per-index probes fetch ``dataset[i]`` for integer ``i``, which it never does.
NOT_BY_INDEX = (
    "its probes fetch dataset[i] for integer indices, and this loader's sampler yields what "
    "__getitem__ takes instead (batch_size=None)"
)


def tree_memory_mb() -> dict[str, Any]:
    """The memory of this process and every process it started, at any depth, and its threads."""
    main = psutil.Process()
    procs = [main, *descendants()]
    read = own_memory_mb(procs)
    main_mb = read["each"].get(main.pid, 0.0)
    return {
        "tree_rss_mb": round(read["rss_mb"], 1),
        "tree_uss_mb": round(read["own_mb"], 1) if read["uss"] else None,
        "main_mb": round(main_mb, 1),
        "children_mb": round(read["own_mb"] - main_mb, 1),
        "processes": len(procs),
        "threads": threading.active_count(),
    }


class _Iteration(threading.Thread):
    """Iterates fresh copies of the pipeline epoch after epoch, handing each batch's arrival to the
    caller through a queue (so a batch that never comes is seen), reading memory at epoch ends."""

    def __init__(self, build: Callable[[], Iterable[Any]], epochs: int, every: int) -> None:
        super().__init__(name="stallscope-pipeline-check", daemon=True)
        self.build = build
        self.epochs = epochs
        self.every = every  # batches per reading when an epoch does not end
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.stop = threading.Event()
        self.loader: Any = None
        self.iterator: Any = None

    def run(self) -> None:
        from ..pipeline.kinds import is_one_shot

        try:
            for epoch in range(self.epochs):
                # The same loader epoch after epoch, as a training loop iterates it; a one-shot
                # iterator is made anew by the TARGET factory.
                if self.loader is None or is_one_shot(self.loader):
                    self.loader = self.build()
                self.iterator = iter(self.loader)
                count = 0
                for batch in self.iterator:
                    count += 1
                    self.events.put(("batch", batch_length(batch)))
                    del batch
                    if self.stop.is_set():
                        return
                    if self.every and count % self.every == 0:
                        self.events.put(("reading", tree_memory_mb()))
                self.events.put(("epoch", (epoch, tree_memory_mb())))
                if is_one_shot(self.loader):  # the next epoch is a new one; a loader stays open
                    close_trial(self.loader, self.iterator)
                if self.stop.is_set():
                    return
            self.events.put(("done", None))
        except BaseException as exc:  # reported to the caller, never raised in this thread
            self.events.put(("error", exc))
        finally:
            with contextlib.suppress(Exception):
                close_trial(self.loader, self.iterator)


def check_pipeline(
    pipeline: Any,
    *,
    codes: list[str],
    timeout: float,
    budget: float,
    progress: Callable[[str, int | None, int | None], None] | None = None,
    on_update: Callable[[CheckResult], None] | None = None,
) -> CheckResult:
    """The checks that apply to a graph or pool pipeline (NOTE [pipeline checks]). A process pool
    the pipeline object keeps is the user's: it stays, as it would between two epochs of theirs."""
    started = time.perf_counter()
    kind = pipeline.kind
    result = CheckResult(target=pipeline.target)
    run = {"memory-growth", "hang", "getitem-error"} & set(codes)
    findings: list[Finding] = []
    readings: list[dict[str, Any]] = []
    stream_readings: list[dict[str, Any]] = []
    samples = batches = 0
    epochs_done = 0
    worker = _Iteration(lambda: kind.build(pipeline.baseline), MAX_EPOCHS, every=0)
    first_epoch_limit = budget / 4
    worker.start()
    try:
        while True:
            elapsed = time.perf_counter() - started
            try:
                event, value = worker.events.get(timeout=timeout)
            except queue.Empty:
                if "hang" in run:
                    findings.append(_hang(worker, timeout, batches))
                break
            if event == "batch":
                samples += int(value)
                batches += 1
                if epochs_done == 0 and not worker.every and elapsed > first_epoch_limit:
                    # A stream whose first epoch does not end: read memory every so many batches.
                    worker.every = max(1, batches // 2)
            elif event == "reading":
                stream_readings.append(value | {"samples": samples})
            elif event == "epoch":
                epochs_done += 1
                readings.append(value[1] | {"samples": samples})
                if progress is not None:
                    progress("memory at epoch ends", epochs_done, MAX_EPOCHS)
                if epochs_done >= MIN_EPOCHS and elapsed > budget / 2:
                    break
            elif event == "error":
                if "getitem-error" in run:
                    findings.append(_raised(value, batches))
                break
            else:
                break
            if elapsed > budget:
                break
    finally:
        worker.stop.set()
        worker.join(timeout=min(10.0, timeout))
    judged_at = "epoch ends"
    series = readings
    if len(readings) < 3 and len(stream_readings) >= 3:
        judged_at, series = "batches", stream_readings
    probe = {
        "readings": series,
        "judged_at": judged_at,
        "batches_per_reading": worker.every or None,
        "epochs": epochs_done,
        "samples": samples,
        "batches": batches,
    }
    if "memory-growth" in run:
        findings += detect_tree_memory_growth(probe)
    result.findings = sort_findings(findings)
    result.probes = {"tree_memory": probe}
    last = series[-1] if series else {}
    not_run = [code for code in NOT_RUN if code in codes]
    if pipeline.kind.fetches_by_index:
        not_checked = [
            {"probe": "pipeline", "codes": [code], "reason": NOT_RUN[code]} for code in not_run
        ]
    else:  # one reason for all of them, said once
        not_checked = (
            [{"probe": "pipeline", "codes": not_run, "reason": NOT_BY_INDEX}] if not_run else []
        )
    if "memory-growth" in run and len(series) < 3:
        not_checked.append(
            {
                "probe": "tree_memory",
                "codes": ["memory-growth"],
                "reason": f"{len(series)} memory readings fit in the budget; it needs 3",
            }
        )
    result.coverage = {
        "mode": "pipeline",
        "indices_checked": None,
        "memory_samples": samples,
        "num_workers": max(0, int(last.get("processes") or 1) - 1),
        "start_method": f"the pipeline's own; {epochs_done} epochs, whole process tree",
        "timeout_s": timeout,
        "budget_s": budget,
        "elapsed_s": round(time.perf_counter() - started, 2),
        "not_checked": not_checked,
        "notes": [
            f"{kind.description} was iterated as it is built, {epochs_done} epochs "
            f"({batches} batches); memory read over the main process and "
            f"{max(0, int(last.get('processes') or 1) - 1)} processes it started, at every "
            f"{'epoch end' if judged_at == 'epoch ends' else f'{worker.every} batches'}."
        ],
    }
    if on_update is not None:
        on_update(result)
    return result


def _hang(worker: _Iteration, timeout: float, batches: int) -> Finding:
    frame = sys._current_frames().get(worker.ident or -1)
    stack = traceback.format_stack(frame)[-6:] if frame is not None else []
    where = stack[-1].strip().splitlines()[0] if stack else "unknown"
    return Finding(
        "hang",
        ERROR,
        f"No batch came for {timeout:g} s after {batches} batches: the pipeline is stuck at "
        f"{where}.",
        {"timeout_s": timeout, "batches_before": batches, "stack": [s.strip() for s in stack]},
        "Find what the stage waits for (a lock, a queue no worker fills, a remote call without a "
        "timeout) and give it a timeout.",
    )


def _raised(exc: BaseException, batches: int) -> Finding:
    return Finding(
        "getitem-error",
        ERROR,
        f"The pipeline raised {describe_exception(exc)} after {batches} batches (iterated as "
        "it is built, epoch after epoch).",
        {"batches_before": batches, "exception": type(exc).__name__},
        "Fix the stage that raised; run the pipeline with --debug for its traceback.",
    )
