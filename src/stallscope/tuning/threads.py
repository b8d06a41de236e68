"""Processes × threads: the tuner's worker-threads phase (NOTE [worker threads] in pipeline/threaded.py).

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
   holds the GIL, so processes carry it across cores), thread counts climb
   the ladder of :func:`thread_counts` while each step gains beyond the noise.
3. *processes* — at the best thread count, the process count doubles while
   it gains and the memory budget allows.

The race then compares the threaded configs with the plain worker counts; at
equal speed (within the tolerance) fewer processes win, then fewer threads
(``cost_key``). Where a process stops gaining from more threads near the rate
its Python time per item allows, a note says the GIL caps the threads, with
the measured figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..pipeline.threaded import ThreadSafety, check_thread_safety, own_batched_fetch
from .regions import LATENCY_CPU_FRACTION

# Thread counts per worker the phase may try (a worker fetches one batch at a time, so
# counts beyond the batch size only idle: see thread_counts).
THREAD_LADDER = (2, 4, 8, 16, 32, 64)
# Share of the tuning budget the threads phase may run up to (it comes before the climb).
THREADS_SHARE = 0.35
# A process near this share of its GIL-bound rate (1 / Python CPU time per item) is capped by the GIL.
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
    """Whether the tuner may try worker threads on this pipeline, and why."""

    counts: tuple[int, ...]
    reason: str
    safety: ThreadSafety | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "counts": list(self.counts),
            "reason": self.reason,
            "thread_safety": None if self.safety is None else self.safety.to_dict(),
        }


def thread_eligibility(pipeline: Any, profile: Any, *, max_seconds: float = SAFETY_CHECK_S) -> ThreadEligibility:
    """The thread counts the search may try (none when threads cannot help or are unsafe), with the reason."""
    if pipeline.is_iterable or not profile.map_style:
        return ThreadEligibility((), "an IterableDataset has no batch of indices to fetch concurrently")
    if profile.cpu_per_wall >= LATENCY_CPU_FRACTION:
        return ThreadEligibility(
            (),
            f"the fetch used {profile.cpu_per_wall:.0%} of a CPU per second of wall time: threads in one process "
            "share its GIL, so they cannot speed up CPU-bound Python",
        )
    counts = thread_counts(pipeline.batch_size)
    if not counts:
        return ThreadEligibility((), "a batch holds one item: a worker has nothing to fetch concurrently")
    own = own_batched_fetch(pipeline.dataset)
    if own is not None:
        return ThreadEligibility((), f"the dataset fetches whole batches itself ({own}.__getitems__), which threads would bypass")
    safety = check_thread_safety(pipeline.dataset, threads=min(max(counts), 16), max_seconds=max_seconds)
    if not safety.safe:
        return ThreadEligibility((), f"worker threads not tried: {safety.reason}", safety)
    return ThreadEligibility(counts, f"thread-safe: {safety.reason}", safety)


def explore_threads(search: Any) -> None:
    """The threads phase (module docstring) over a :class:`~stallscope.tuning.search.Search`."""
    space = search.space
    counts = getattr(space, "worker_threads", ())
    if not counts or search.region.name != "latency-bound":
        return
    cap = search.worker_cap(search.workers(1).prefetch_factor or 2)
    procs = max(1, min(space.cores, cap)) if cap >= 1 else 0
    parent = search.workers(procs)
    if search.measure(parent, "threads", share=THREADS_SHARE) is None:
        return
    best, other = parent, None  # other: the neighbouring thread count measured, for the GIL note
    for k in counts:
        variant = search.workers(procs, worker_threads=k)
        trial = search._try_variant("worker_threads", parent, variant, THREADS_SHARE, phase="threads")
        if trial is None or not trial.ok:
            break
        if not search._improves(variant, best):
            other = variant
            break
        best, other = variant, best
    if best == parent:
        search._note(
            f"worker threads did not help: {procs} process(es) with {counts[0]} threads each measured "
            f"{search.rate(search.workers(procs, worker_threads=counts[0])):,.0f} samples/s vs "
            f"{search.rate(parent):,.0f} without"
        )
        return
    if other is not None and other != parent:
        _note_gil_cap(search, parent, best, other)
    current = procs
    while True:
        nxt = max(1, 2 * current)
        if nxt > cap or nxt > space.max_workers:
            return
        variant = search.workers(nxt, worker_threads=best.worker_threads)
        trial = search.measure(variant, "threads", share=THREADS_SHARE)
        if trial is None or not trial.ok or not search._improves(variant, best):
            return
        best, current = variant, nxt


def gil_capped_rate(profile: Any) -> float | None:
    """Items per second one process can run when each holds the GIL for its Python CPU time."""
    cpu_s = profile.seconds_per_sample * profile.cpu_per_wall
    return 1.0 / cpu_s if cpu_s > 0 else None


def _note_gil_cap(search: Any, parent: Any, best: Any, other: Any) -> None:
    """Say the GIL caps the threads, with the figures, when a process sits near its GIL-bound rate."""
    cap = gil_capped_rate(search.profile)
    procs = max(1, best.num_workers)
    rate = search.rate(best)
    per_process = rate / procs
    if cap is None or per_process < GIL_SHARE * cap:
        return
    search._note(
        f"worker threads help (+{rate / search.rate(parent) - 1:.0%} over {parent.label()}) but the GIL caps them: "
        f"{best.label()} reached {rate:,.0f} samples/s ({per_process:,.0f} per process), "
        f"{other.worker_threads} threads {search.rate(other):,.0f}; each item holds the GIL for about "
        f"{1000.0 / cap:.2f} ms of Python, which caps one process near {cap:,.0f} samples/s: "
        "more processes, not more threads, go further"
    )


def threads_recommendations(section: dict[str, Any]) -> list[dict[str, Any]]:
    """The pick fetches with threads: say how, against the best plain worker count measured (pure)."""
    best = section["best"]
    threads = best["config"].get("worker_threads", 0)
    if not threads:
        return []
    plain = [
        t for t in section.get("trials", [])
        if t["error"] is None and not t["config"].get("worker_threads") and t["config"]["num_workers"] > 0
    ]
    measured = f"{best['samples_per_s']:,.1f} samples/s with {best['label']}"
    gain = None
    if plain:
        top = max(plain, key=lambda t: t["samples_per_s"])
        gain = best["samples_per_s"] / top["samples_per_s"] - 1 if top["samples_per_s"] > 0 else None
        measured += (
            f" vs {top['samples_per_s']:,.1f} with the best plain worker count measured ({top['label']}, "
            f"{top['config']['num_workers']} processes)"
        )
    workers = best["config"]["num_workers"]
    where = f"each of the {workers} workers" if workers else "the main process"
    return [{
        "id": "worker-threads",
        "title": f"Fetch each batch's items with {threads} threads per worker",
        "detail": (
            f"The fetch mostly waits, and the dataset passed the thread-safety check: {where} fetches a batch's "
            f"items with {threads} threads, which overlaps the waits like more processes would, for a fraction of "
            f"their memory. Wrap the dataset: dataset = ss.threaded_dataset(dataset, threads={threads})."
        ),
        "measured": measured,
        "expected_gain": (
            f"{gain:+.0%} throughput with {workers} processes" if gain is not None
            else f"{workers} processes instead of more"
        ),
    }]
