"""Processes × threads: the tuner's worker-threads phase (NOTE [worker threads] in
pipeline/threaded.py).

In the latency-bound region more worker processes overlap the fetch's waits,
each at the memory and start-up of a whole Python process. K threads inside
each worker overlap them too, for far less memory. The phase runs right after
the region is known, before the worker-count climb (threads are cheap to
measure: few processes):

1. *eligibility* (:func:`thread_eligibility`, before the search) — only a
   map-style dataset whose fetch mostly waits, with more than one item per
   batch, no batched fetch of its own, and that passes
   :func:`~stallscope.pipeline.threaded.check_thread_safety`. Anything else:
   no thread count is tried, and the reason is recorded.
2. *threads* — at one process per usable core (the Python part of a fetch
   holds the GIL, so processes carry it across cores), the thread count that
   gives them the concurrency the region predicts (cores ÷ CPU share of the
   fetch), from the ladder of :func:`thread_counts`. One measurement instead
   of a climb: each costs a loader start-up, and budgets are short.
3. *processes* — at that thread count, the process count doubles while it
   gains, the memory budget allows, and processes × threads stay within twice
   the predicted concurrency.
4. *neighbours* — half and double the threads at the best process count:
   fewer may do as well (the race then prefers them), more may still pay,
   and together they show whether more threads stopped paying.

The race then compares the threaded configs with the plain worker counts; at
equal speed (within the tolerance) fewer processes win, then fewer threads
(``cost_key``). Where a process stops gaining from more threads near the rate
its Python time per item allows, a note says the GIL caps the threads, with
the measured figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..pipeline.threaded import ThreadSafety, check_thread_safety, own_batched_fetch
from .regions import LATENCY_CPU_FRACTION

# Thread counts per worker the phase may try (a worker fetches one batch at a time, so
# counts beyond the batch size only idle: see thread_counts).
THREAD_LADDER = (2, 4, 8, 16, 32, 64)
# A process near this share of its GIL-bound rate (1 / Python CPU time per item) is capped by the
# GIL.
GIL_SHARE = 0.7
# Seconds the thread-safety check may take, at most.
SAFETY_CHECK_S = 1.5


def thread_counts(batch_size: int) -> tuple[int, ...]:
    """Counts worth trying: the ladder below the batch size, and the batch size itself (capped)."""
    if batch_size < 2:
        return ()
    top = min(batch_size, THREAD_LADDER[-1])
    return tuple(sorted({k for k in THREAD_LADDER if k < top} | {top}))


@dataclass
class ThreadEligibility:
    """Whether the tuner may try worker threads on this pipeline, and why.

    The cheap reasons are decided up front; the thread-safety check runs when
    the threads phase first needs it (:meth:`confirm`), so a search that never
    gets there (another region, no time left) does not pay for it.
    """

    counts: tuple[int, ...]
    reason: str
    safety: ThreadSafety | None = None
    dataset: Any = field(default=None, repr=False)
    check_s: float = SAFETY_CHECK_S

    def confirm(self) -> bool:
        """Run the thread-safety check once; afterwards ``counts`` is empty if it failed."""
        if not self.counts or self.safety is not None or self.dataset is None:
            return bool(self.counts)
        self.safety = check_thread_safety(
            self.dataset, threads=min(max(self.counts), 16), max_seconds=self.check_s
        )
        if self.safety.safe:
            self.reason = f"thread-safe: {self.safety.reason}"
        else:
            self.counts = ()
            self.reason = f"worker threads not tried: {self.safety.reason}"
        return self.safety.safe

    def to_dict(self) -> dict[str, Any]:
        return {
            "counts": list(self.counts),
            "reason": self.reason,
            "thread_safety": None if self.safety is None else self.safety.to_dict(),
        }


def thread_eligibility(
    pipeline: Any, profile: Any, *, budget_s: float | None = None
) -> ThreadEligibility:
    """The thread counts the search may try (none when threads cannot help), with the reason.

    Thread safety is checked later, by :meth:`ThreadEligibility.confirm`, in at
    most ``SAFETY_CHECK_S`` and 4% of a tuning ``budget_s``.
    """
    if pipeline.is_iterable or not profile.map_style:
        return ThreadEligibility(
            (), "an IterableDataset has no batch of indices to fetch concurrently"
        )
    if profile.cpu_per_wall >= LATENCY_CPU_FRACTION:
        return ThreadEligibility(
            (),
            f"the fetch used {profile.cpu_per_wall:.0%} of a CPU per second of wall time: threads "
            "in one process share its GIL, so they cannot speed up CPU-bound Python",
        )
    counts = thread_counts(pipeline.batch_size)
    if not counts:
        return ThreadEligibility(
            (), "a batch holds one item: a worker has nothing to fetch concurrently"
        )
    own = own_batched_fetch(pipeline.dataset)
    if own is not None:
        return ThreadEligibility(
            (),
            f"the dataset fetches whole batches itself ({own}.__getitems__), which threads would "
            "bypass",
        )
    check_s = SAFETY_CHECK_S if budget_s is None else min(SAFETY_CHECK_S, 0.04 * budget_s)
    return ThreadEligibility(
        counts, "thread safety not checked yet", dataset=pipeline.dataset, check_s=check_s
    )


def explore_threads(search: Any) -> None:
    """The threads phase (module docstring) over a :class:`~stallscope.tuning.search.Search`."""
    space = search.space
    counts = tuple(getattr(space, "worker_threads", ()))
    if not counts or search.region.name != "latency-bound":
        return
    share = (
        search.settings.scan_share
    )  # the scan's share of the budget: the phase comes before the climb
    cap = search.worker_cap(search.workers(1).prefetch_factor or 2)
    procs = max(1, min(space.cores, cap)) if cap >= 1 else 0
    parent = search.workers(procs)
    if search.measure(parent, "threads", share=share) is None:
        return
    first = search.workers(
        procs, worker_threads=_first_count(counts, search.region.predicted_workers, procs)
    )
    gate = getattr(space, "thread_gate", None)
    if gate is not None and gate.safety is None:
        # The thread-safety check, only now that a threaded measurement is due and affordable.
        if not search.affordable(
            search.estimate_cost(first, search.settings.scan_window_s) + gate.check_s, share
        ):
            search._note(
                f"time budget: did not check thread safety or measure {first.label()} in the "
                "threads phase"
            )
            return
        if not gate.confirm():
            space.worker_threads = ()
            search._note(gate.reason)
            return
    trial = search._try_variant("worker_threads", parent, first, share, phase="threads")
    if trial is None or not trial.ok:
        return
    if not search._improves(first, parent):
        search._note(
            f"worker threads did not help: {first.label()} measured {search.rate(first):,.0f} "
            f"samples/s vs {search.rate(parent):,.0f} for {parent.label()}"
        )
        return
    best = first
    # Beyond twice the concurrency the region predicts, more processes would only add memory.
    enough = 2 * (search.region.predicted_workers or float("inf"))
    while 2 * max(1, best.num_workers) <= min(cap, space.max_workers):
        variant = best.replace(num_workers=2 * max(1, best.num_workers))
        if variant.num_workers * variant.worker_threads > enough:
            break
        trial = search.measure(variant, "threads", share=share)
        if trial is None or not trial.ok or not search._improves(variant, best):
            break
        best = variant
    # Neighbouring thread counts at that process count: fewer may do as well (the race then prefers
    # them), more may still pay; either way they show whether more threads stopped paying.
    k = best.worker_threads
    fewer = [c for c in counts if c < k]
    if fewer:
        search.measure(best.replace(worker_threads=fewer[-1]), "threads", share=share)
    more = [c for c in counts if c > k]
    if more:
        variant = best.replace(worker_threads=more[0])
        trial = search.measure(variant, "threads", share=share)
        if trial is not None and trial.ok and search._improves(variant, best):
            best = variant
    _note_gil_cap(search, parent, best)


def _first_count(counts: tuple[int, ...], predicted_workers: float | None, procs: int) -> int:
    """The thread count that gives ``procs`` processes the concurrency the region predicts (see
    classify)."""
    per_process = (predicted_workers or counts[-1]) / max(1, procs)
    return next((c for c in counts if c >= per_process), counts[-1])


def gil_capped_rate(profile: Any) -> float | None:
    """Items per second one process can run when each holds the GIL for its Python CPU time."""
    cpu_s = profile.seconds_per_sample * profile.cpu_per_wall
    return 1.0 / cpu_s if cpu_s > 0 else None


def _stopped_paying(search: Any, best: Any) -> Any | None:
    """A thread count measured next to ``best`` that shows more threads stopped paying, or None."""
    measured = {
        c.worker_threads: c
        for c, t in search._scan.items()
        if t.ok and c.worker_threads and c == best.replace(worker_threads=c.worker_threads)
    }
    more = sorted(k for k in measured if k > best.worker_threads)
    if more:
        return measured[more[0]]  # more threads were measured and did not win
    fewer = sorted(k for k in measured if k < best.worker_threads)
    if fewer and not search._improves(best, measured[fewer[-1]]):
        return measured[fewer[-1]]  # doubling the threads bought nothing beyond the noise
    return None


def _note_gil_cap(search: Any, parent: Any, best: Any) -> None:
    """Say the GIL caps the threads, with the figures, when more threads stopped paying near a
    process's GIL-bound rate (1 / Python CPU time per item)."""
    other = _stopped_paying(search, best)
    cap = gil_capped_rate(search.profile)
    procs = max(1, best.num_workers)
    rate = search.rate(best)
    per_process = rate / procs
    if other is None or cap is None or per_process < GIL_SHARE * cap:
        return
    cores = search.space.cores
    further = (
        f"more processes (up to the {cores} cores), not more threads, go further"
        if procs < cores
        else "the processes already cover every core"
    )
    search._note(
        f"worker threads help (+{rate / search.rate(parent) - 1:.0%} over {parent.label()}) but "
        f"the GIL caps them: {best.label()} reached {rate:,.0f} samples/s ({per_process:,.0f} per "
        f"process), with {other.worker_threads} threads {search.rate(other):,.0f}; each item holds "
        f"the GIL for about {1000.0 / cap:.2f} ms of Python, which caps one process near "
        f"{cap:,.0f} samples/s: {further}"
    )
