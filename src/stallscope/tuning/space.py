"""What the search works with: the pipeline's profile, the knobs it may turn, its budgets.

See NOTE [tuning strategy] in :mod:`stallscope.tuning.search`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from ..config import LoaderConfig
from ..thresholds import TIE_MARGIN

MB = 1024 * 1024

# A climb step must beat the best so far by this much (or by the measured noise) to count: the
# tie margin (thresholds.py), since a smaller gain is one the final race would call a tie. In the
# final race, within TIE_MARGIN of the leader (paired by round) a config is tied with it, the
# cheapest tied config is the pick, and the confidence is that the pick is no slower than any rival
# beyond it (NOTE [what the confidence states] in confidence.py).
MIN_GAIN = TIE_MARGIN
# Within this fraction of the leader, the cheaper config is preferred (a plateau) among single
# scan measurements: 1%, below the tie margin, because one scan measurement is not raced again.
PLATEAU_TOLERANCE = 0.01
# Per-worker private memory assumed until one worker has been measured.
DEFAULT_WORKER_BYTES = 256 * MB
# Memory allowed per fetch thread (worker_threads) on top of its process.
THREAD_BYTES = 1 * MB


@dataclass
class Profile:
    """What cheap in-process measurements revealed about the pipeline."""

    seconds_per_sample: float  # wall time of one fetch, single process
    cpu_per_wall: float  # process CPU time / wall time during the fetches
    collate_s: float = 0.0  # collating one batch
    batch_bytes: int = 0
    jitter: float = 1.0  # p95 / p50 of per-item fetch times
    spike: float = 1.0  # max / median of per-item fetch times
    map_style: bool = True
    length: int | None = None
    batched_fetch: str | None = None  # the vectorised fetch kind available, if any
    batched_speedup: float | None = None  # in-process: per-item batch time / vectorised batch time
    items: int = 0  # how many items were timed
    # A loader that makes its own batches (its sampler yields what __getitem__ takes, a graph, an
    # engine): the samples its batches held on average; the config's batch size is not theirs.
    samples_per_batch: float | None = None

    def batch_seconds(self, batch_size: int) -> float:
        samples = self.samples_per_batch if self.samples_per_batch is not None else batch_size
        return samples * self.seconds_per_sample + self.collate_s

    @property
    def jittery(self) -> bool:
        return self.jitter >= 2.0 or self.spike >= 5.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ms_per_sample": round(self.seconds_per_sample * 1000, 4),
            "cpu_per_wall": round(self.cpu_per_wall, 3),
            "collate_ms": round(self.collate_s * 1000, 4),
            "batch_bytes": self.batch_bytes,
            "jitter_p95_over_p50": round(self.jitter, 3),
            "spike_max_over_median": round(self.spike, 3),
            "map_style": self.map_style,
            "length": self.length,
            "batched_fetch": self.batched_fetch,
            "batched_speedup_in_process": None
            if self.batched_speedup is None
            else round(self.batched_speedup, 3),
            "items_timed": self.items,
            "samples_per_batch": None
            if self.samples_per_batch is None
            else round(self.samples_per_batch, 2),
        }


@dataclass
class MemoryBudget:
    """Workers and in-flight batches must fit in ``budget_bytes`` (tf.data's ``ram_budget`` idea).

    NOTE [memory budget]
    The budget is a limit on what the workers were *measured* to hold, not a preference. A measured
    config's footprint is its workers' memory as measured (``footprints``: the peak of the workers'
    resident memory summed over them, see ``tuner._workers_bytes``) plus its in-flight batches
    (prefetch_factor × batch bytes per worker). Before a config is measured, it is estimated
    conservatively: workers × (the largest per-worker memory measured so far on configs with at
    least as many fetch threads per worker, :meth:`per_worker`) + its in-flight batches, with
    ``DEFAULT_WORKER_BYTES`` (+ ``THREAD_BYTES`` per thread) per worker until one has been
    measured. The search measures no config whose estimate exceeds the budget,
    and races, picks and recommends no config whose measured footprint does (:meth:`over`).

    Resident memory, not private (USS): a forked worker starts with the parent's pages shared, and
    Python's reference counts and garbage collector copy them one by one as the worker runs, so a
    short early reading of private memory (12 MB per worker on a latency-bound source) said 125
    workers fit in 1500 MB, where each held 150 MB resident. Counting every page a worker maps
    overstates what the workers add together while pages are still shared, never understates it.
    """

    budget_bytes: int
    batch_bytes: int = 0
    worker_bytes: int = DEFAULT_WORKER_BYTES
    measured: bool = False
    # Measured workers' memory per config (bytes, in-flight batches not included).
    footprints: dict[LoaderConfig, int] = field(default_factory=dict)

    def _batches(self, config: LoaderConfig) -> int:
        return config.num_workers * (config.prefetch_factor or 2) * self.batch_bytes

    def need(self, config: LoaderConfig) -> int:
        """The config's footprint: measured where it was, else the conservative estimate."""
        if config.num_workers == 0:
            return 0
        measured = self.footprints.get(config)
        if measured is not None:
            return measured + self._batches(config)
        return self.estimate(config)

    def estimate(self, config: LoaderConfig) -> int:
        if config.num_workers == 0:
            return 0
        return config.num_workers * self.per_worker(config.worker_threads) + self._batches(config)

    def per_worker(self, threads: int = 0) -> int:
        """A worker's memory with ``threads`` fetch threads, conservatively: the largest measured
        per worker on configs with at least as many threads (a worker's memory does not depend on
        how many siblings it has, and does not shrink with more threads); where none has, the
        largest measured plus ``THREAD_BYTES`` per missing thread."""
        measured = [(b // c.num_workers, c.worker_threads) for c, b in self.footprints.items()]
        if not measured:
            return self.worker_bytes + threads * THREAD_BYTES
        covering = [b for b, k in measured if k >= threads]
        if covering:
            return max(covering)
        return max(b + (threads - k) * THREAD_BYTES for b, k in measured)

    def fits(self, config: LoaderConfig) -> bool:
        return self.need(config) <= self.budget_bytes

    def over(self, config: LoaderConfig) -> bool:
        """Measured, and its measured footprint exceeds the budget."""
        return config in self.footprints and not self.fits(config)

    def max_workers(self, prefetch_factor: int = 2) -> int:
        per_worker = self.worker_bytes + prefetch_factor * self.batch_bytes
        return int(self.budget_bytes // max(1, per_worker))

    def observe(self, worker_bytes: int | None) -> None:
        if worker_bytes is None or worker_bytes <= 0:
            return
        self.worker_bytes = (
            worker_bytes if not self.measured else max(self.worker_bytes, worker_bytes)
        )
        self.measured = True

    def observe_config(self, config: LoaderConfig, workers_bytes: int | None) -> None:
        """A measurement of ``config``'s workers (their memory summed): its footprint (the peak of
        every measurement of it) and the per-worker figure the estimates use."""
        if config.num_workers == 0 or workers_bytes is None or workers_bytes <= 0:
            return
        self.footprints[config] = max(workers_bytes, self.footprints.get(config, 0))
        self.observe(workers_bytes // config.num_workers)

    def measured_bytes(self, config: LoaderConfig) -> int | None:
        """The config's measured footprint (workers and in-flight batches); 0 for no worker."""
        if config.num_workers == 0:
            return 0
        return self.need(config) if config in self.footprints else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget_mb": round(self.budget_bytes / MB, 1),
            "worker_mb": round(self.worker_bytes / MB, 1),
            "worker_mb_measured": self.measured,
            "batch_mb": round(self.batch_bytes / MB, 3),
            "max_workers_at_prefetch_2": self.max_workers(2),
            "measured_mb": {
                c.label(): round(self.need(c) / MB, 1)
                for c in sorted(self.footprints, key=cost_key)
            },
        }


@dataclass
class SearchSpace:
    """Which knobs the search may turn, and their limits."""

    cores: int
    batch_size: int
    max_workers: int
    prefetch_factors: tuple[int, ...] = (2, 4, 8)
    in_order: bool = True  # may try in_order=False
    batched_fetch: bool = False  # a vectorised fetch is available
    pin_memory: bool = False  # CUDA: pin by default, measure the cost
    threads: tuple[int, ...] = ()  # main-process intra-op thread counts to try at 0 workers
    worker_threads: tuple[
        int, ...
    ] = ()  # fetch threads per worker to try (latency-bound, thread-safe only)
    thread_gate: Any = (
        None  # tuning/threads.py ThreadEligibility: why (not), and the deferred thread-safety check
    )
    batch_sizes: tuple[int, ...] = ()  # other batch sizes (only when the user allows it)
    contexts: tuple[str, ...] = ()  # other start methods to compare on start-up
    persistent_workers: bool = True  # measure the pick's epoch-boundary gap with persistent workers
    # The pick may take persistent_workers=True on that measurement; False: the loader's own API
    # does not take it (NOTE [a DataLoader's factory]), so the saving is advice beside the pick.
    persistent_in_pick: bool = True
    multiprocessing_context: str | None = None  # the start method candidates use
    worker_methods: tuple[str, ...] = ()  # torchdata.nodes mappers: threads or processes
    snapshot_steps: tuple[int, ...] = ()  # StatefulDataLoader snapshot intervals to try
    epoch_batches: int | None = None  # batches in one epoch of the user's loader, where known

    @property
    def can_persist(self) -> bool:
        """A pick may keep its workers across epochs, so a config's restarts may be left out of
        its rate per epoch (NOTE [per-epoch rate])."""
        return self.persistent_workers and self.persistent_in_pick

    def to_dict(self) -> dict[str, Any]:
        return {
            "cores": self.cores,
            "batch_size": self.batch_size,
            "max_workers": self.max_workers,
            "prefetch_factors": list(self.prefetch_factors),
            "in_order": self.in_order,
            "batched_fetch": self.batched_fetch,
            "pin_memory": self.pin_memory,
            "threads": list(self.threads),
            "worker_threads": list(self.worker_threads),
            "worker_threads_check": None
            if self.thread_gate is None
            else self.thread_gate.to_dict(),
            "batch_sizes": list(self.batch_sizes),
            "contexts": list(self.contexts),
            "worker_methods": list(self.worker_methods),
            "snapshot_steps": list(self.snapshot_steps),
        }


@dataclass
class SearchSettings:
    budget_s: float = 60.0
    scan_window_s: float = 0.5
    confirm_window_s: float = 0.75
    # A single-process config's race window: every preemption of the main process on a busy machine
    # stops its loading outright (no workers' prefetch buffer absorbs it), so a short window is
    # mostly scheduler noise. Worker configs pay start-up and warm-up around their window anyway.
    single_process_window_s: float = 1.0
    min_batches: int = 8  # a window holds at least this many batches, however long they take
    min_rounds: int = 2  # rounds before a config can be dropped as clearly slower
    max_rounds: int = (
        8  # the race stops earlier once the pick is STOP_CONFIDENCE sure (confidence.py)
    )
    rounds: int | None = None  # a fixed number of confirm rounds (--repeats)
    min_gain: float = MIN_GAIN
    tolerance: float = PLATEAU_TOLERANCE
    tie_margin: float = TIE_MARGIN
    max_finalists: int = 3
    seed: int = 0
    # shares of the budget the phases may run up to
    scan_share: float = 0.5
    knobs_share: float = 0.65
    epoch_gap_epochs: int = 2  # short epochs per persistent_workers run (one boundary each)


def confirm_window(config: LoaderConfig, settings: SearchSettings) -> float:
    """The race window of ``config``: longer for single-process configs
    (``single_process_window_s``)."""
    if config.num_workers == 0:
        return max(settings.confirm_window_s, settings.single_process_window_s)
    return settings.confirm_window_s


def cost_key(config: LoaderConfig) -> tuple[int, ...]:
    """Preferred first among equals: fewer workers, then fewer fetch threads per worker, shallower
    prefetch, ordered, default intra-op threads,
    smaller batches, pinned memory (a loader-only measurement cannot see the faster host-to-device
    copy it buys, so pinning stays unless it measurably costs), batched fetching."""
    return (
        config.num_workers,
        config.worker_threads,
        config.prefetch_factor or 0,
        0 if config.in_order else 1,
        0 if config.torch_threads is None else 1,
        config.batch_size,
        0 if config.pin_memory else 1,
        0 if config.batched_fetch else 1,
    )


# Start-up guesses for the plan, before any worker has run (seconds; fork on Linux is faster).
PLAN_STARTUP_S = 0.1
PLAN_STARTUP_PER_WORKER_S = 0.05
# Measurements a confirmed pick needs at least: baseline, 0 workers, cores workers, and two
# interleaved rounds (A B B A) of two finalists.
CONFIRMED_MEASUREMENTS = 3 + 2 * 2 * 2


def budget_plan(
    profile: Profile, space: SearchSpace, settings: SearchSettings, *, elapsed_s: float = 0.0
) -> dict[str, Any]:
    """What the time budget fits, planned from the batch time measured in-process.

    A measurement holds a warm-up (the prefetch buffer, see
    ``throughput.measure``) and a window of at least ``min_batches`` batches,
    so on a slow pipeline its length is set by the batch time, not by the
    window's seconds: a 0.3 s batch makes a measurement of about 3 s at 0 workers.
    """
    batch_s = profile.batch_seconds(space.batch_size)
    n = settings.min_batches
    single = PLAN_STARTUP_S + (2 + n) * batch_s
    single = max(single, PLAN_STARTUP_S + settings.scan_window_s + 2 * batch_s)
    workers = max(0, min(space.cores, space.max_workers))
    estimates = [single]
    if workers:
        per_batch = batch_s / workers
        warmup = workers * 2 + workers + 1
        multi = PLAN_STARTUP_S + PLAN_STARTUP_PER_WORKER_S * workers + warmup * per_batch
        estimates.append(multi + max(settings.scan_window_s, n * per_batch))
    measurement_s = sum(estimates) / len(estimates)
    left = max(0.0, settings.budget_s - elapsed_s)
    fits = int(left // measurement_s) if measurement_s > 0 else 0
    confirmable = fits >= CONFIRMED_MEASUREMENTS
    needed_s = elapsed_s + CONFIRMED_MEASUREMENTS * measurement_s
    summary = (
        f"plan: {batch_s:.3g} s per batch in one process; with windows of at least {n} batches a "
        f"measurement takes about {measurement_s:.1f} s, so the {left:.0f} s left fit about {fits} "
        f"measurement{'' if fits == 1 else 's'}"
    )
    if not confirmable:
        summary += (
            ": too few for a scan and a 2-round final race, so the pick will "
            f"likely not be confirmed (a budget of about {math.ceil(needed_s)} s would fit one)"
        )
    return {
        "batch_s": round(batch_s, 4),
        "window_batches": n,
        "measurement_s": round(measurement_s, 3),
        "budget_left_s": round(left, 2),
        "measurements_fit": fits,
        "confirmable": confirmable,
        "budget_to_confirm_s": math.ceil(needed_s),
        "summary": summary,
    }


def revise_plan(plan: dict[str, Any], costs: list[float], *, left_s: float) -> str | None:
    """Check the plan against the first real measurements (``costs``, seconds each), record what
    they took, and say so when the plan was off by more than 2x: it came from in-process fetches,
    and a worker process, free of the main process's thread contention, can be much faster."""
    planned = plan.get("measurement_s") or 0.0
    if not costs or planned <= 0:
        return None
    measured = statistics.median(costs)
    plan["measured_measurement_s"] = round(measured, 3)
    if 0.5 <= measured / planned <= 2.0:
        return None
    return (
        f"plan revised: the first measurements took {measured:.1f} s each, not {planned:.1f} s, so "
        f"the {left_s:.0f} s left fit about {int(left_s // measured)} more"
    )
