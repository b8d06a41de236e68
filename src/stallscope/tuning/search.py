"""The tuner's search strategy: pure decisions over an :class:`Evaluator`.

Nothing here starts a worker. The strategy sees the pipeline only through an
evaluator (``measure`` one config, ``interleaved`` repeats of several, and a
clock), so the same code runs on real DataLoaders (``tuner.LoaderEvaluator``)
and on a simulated cost model with injected noise and a fake clock
(:class:`SimulatedEvaluator`, used by the tests).

NOTE [tuning strategy]
A grid measures every combination; most of them are obviously bad once a few
cheap numbers are known. The search runs in phases, each bounded by a share
of the time budget:

1. *probe* — the user's baseline and ``num_workers=0`` (the single-process
   rate ``r0``), plus the in-process :class:`Profile` the caller measured
   (cost per sample, CPU time / wall time of the fetch, batch bytes, jitter).
2. *scale* — ``num_workers = cores``; with ``r0`` and the profile this picks
   the region (:func:`classify`): CPU-bound (optimum near the usable cores),
   latency-bound (the fetch mostly waits: more workers than cores overlap the
   waits, so worker counts grow geometrically — ×4 while the gain stays near
   linear and the CPU fraction predicts room, else ×2 — until the gain falls
   below the noise, the memory budget or the worker cap), or overhead-bound
   (a batch costs about as much as moving it between processes: 0 or 1 worker,
   batched fetching).
3. *refine* — geometric midpoints between the best worker count and its
   measured neighbours, while they are far apart.
4. *knobs* — at the best worker count, one measurement per knob that can
   matter here: deeper prefetch (the whole ladder when the source is
   jittery), ``in_order=False`` with two or more workers, batched fetching when available, intra-op threads at 0 workers,
   ``pin_memory`` on CUDA, batch sizes when allowed.
5. *confirm* — the few finalists (best few, plus the fewest workers within a
   few percent, plus the baseline once for the speed-up) race in interleaved
   rounds (A B … B A). After each round, configs clearly slower than the
   leader drop out; the race stops when the pick is clear
   (:func:`decide`: bootstrap confidence), on the round limit, or the budget.
   Within ``tolerance`` of the leader the cheaper config wins (fewer workers,
   shallower prefetch): a plateau is not worth extra processes.
6. *startup* — with budget left, the start-up time of other start methods.

The memory budget (:class:`MemoryBudget`) vetoes any config whose workers and
in-flight batches would not fit before it is measured.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config import LoaderConfig

MB = 1024 * 1024

# A climb step must beat the best so far by this much (or by the measured noise) to count.
MIN_GAIN = 0.03
# Within this fraction of the leader, the cheaper config is preferred (a plateau).
PLATEAU_TOLERANCE = 0.01
# Confidence is the probability that the pick reaches BAR × every rival's rate.
BAR = 0.97
# The fetch is latency-bound when it uses less CPU than this per second of wall time.
LATENCY_CPU_FRACTION = 0.5
# A batch cheaper than this in-process is in the range of worker IPC costs.
OVERHEAD_BATCH_S = 0.004
# Per-worker private memory assumed until one worker has been measured.
DEFAULT_WORKER_BYTES = 256 * MB
# The noise threshold for a gain never exceeds this.
MAX_SIG = 0.10
# Refine a bracket only while neighbour / best is at least this (finer steps are within noise).
REFINE_RATIO = 1.3


# -- measurements -------------------------------------------------------------------


@dataclass
class Trial:
    """One measurement of one config, as the search sees it."""

    config: LoaderConfig
    samples_per_s: float
    phase: str
    startup_s: float | None = None
    window_s: float | None = None
    batches: int | None = None
    batch_p50_ms: float | None = None
    batch_p95_ms: float | None = None
    rel_se: float | None = None  # relative standard error of the rate within its window
    worker_bytes: int | None = None  # measured private memory per worker
    cost_s: float = 0.0  # wall time the measurement took, start-up included
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.samples_per_s > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "label": self.config.label(),
            "samples_per_s": _round(self.samples_per_s, 2),
            "phase": self.phase,
            "startup_s": _round(self.startup_s, 4),
            "window_s": _round(self.window_s, 3),
            "batches": self.batches,
            "batch_ms": {"p50": _round(self.batch_p50_ms, 3), "p95": _round(self.batch_p95_ms, 3)},
            "rel_se": _round(self.rel_se, 4),
            "worker_mb": None if self.worker_bytes is None else round(self.worker_bytes / MB, 1),
            "cost_s": _round(self.cost_s, 3),
            "error": self.error,
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


class Evaluator(Protocol):
    """What the search needs from the world: measurements and a clock."""

    def elapsed(self) -> float:
        """Seconds since tuning started."""
        ...

    def measure(self, config: LoaderConfig, *, window_s: float, phase: str) -> Trial: ...

    def interleaved(
        self, configs: Sequence[LoaderConfig], *, repeats: int, window_s: float, phase: str
    ) -> list[list[Trial]]:
        """``repeats`` rounds of A B … B A; the trials per config, in ``configs`` order."""
        ...


class InterleavingEvaluator:
    """``interleaved`` in terms of ``measure``, shared by the real and the simulated evaluator."""

    def measure(self, config: LoaderConfig, *, window_s: float, phase: str) -> Trial:
        raise NotImplementedError

    def interleaved(
        self, configs: Sequence[LoaderConfig], *, repeats: int, window_s: float, phase: str
    ) -> list[list[Trial]]:
        """``repeats`` rounds of A B … B A, so drift and order effects hit every config alike."""
        out: list[list[Trial]] = [[] for _ in configs]
        order = list(range(len(configs)))
        for _ in range(repeats):
            for index in order + order[::-1]:
                out[index].append(self.measure(configs[index], window_s=window_s, phase=phase))
        return out


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

    def batch_seconds(self, batch_size: int) -> float:
        return batch_size * self.seconds_per_sample + self.collate_s

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
            "batched_speedup_in_process": None if self.batched_speedup is None else round(self.batched_speedup, 3),
            "items_timed": self.items,
        }


@dataclass
class MemoryBudget:
    """Workers and in-flight batches must fit in ``budget_bytes`` (tf.data's ``ram_budget`` idea).

    Need = workers × (private memory per worker + prefetch_factor × batch bytes).
    Per-worker memory is assumed (``DEFAULT_WORKER_BYTES``) until a worker has
    been measured, then the largest measured value is used.
    """

    budget_bytes: int
    batch_bytes: int = 0
    worker_bytes: int = DEFAULT_WORKER_BYTES
    measured: bool = False

    def need(self, config: LoaderConfig) -> int:
        if config.num_workers == 0:
            return 0
        per_worker = self.worker_bytes + (config.prefetch_factor or 2) * self.batch_bytes
        return config.num_workers * per_worker

    def fits(self, config: LoaderConfig) -> bool:
        return self.need(config) <= self.budget_bytes

    def max_workers(self, prefetch_factor: int = 2) -> int:
        per_worker = self.worker_bytes + prefetch_factor * self.batch_bytes
        return int(self.budget_bytes // max(1, per_worker))

    def observe(self, worker_bytes: int | None) -> None:
        if worker_bytes is None or worker_bytes <= 0:
            return
        self.worker_bytes = worker_bytes if not self.measured else max(self.worker_bytes, worker_bytes)
        self.measured = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget_mb": round(self.budget_bytes / MB, 1),
            "worker_mb": round(self.worker_bytes / MB, 1),
            "worker_mb_measured": self.measured,
            "batch_mb": round(self.batch_bytes / MB, 3),
            "max_workers_at_prefetch_2": self.max_workers(2),
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
    batch_sizes: tuple[int, ...] = ()  # other batch sizes (only when the user allows it)
    contexts: tuple[str, ...] = ()  # other start methods to compare on start-up
    persistent_workers: bool = True  # recommend persistent workers when the pick has workers
    multiprocessing_context: str | None = None  # the start method candidates use

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
            "batch_sizes": list(self.batch_sizes),
            "contexts": list(self.contexts),
        }


@dataclass
class SearchSettings:
    budget_s: float = 60.0
    scan_window_s: float = 0.5
    confirm_window_s: float = 0.75
    min_batches: int = 8  # a window holds at least this many batches (as throughput.measure does)
    min_rounds: int = 2
    max_rounds: int = 6
    rounds: int | None = None  # a fixed number of confirm rounds (--repeats)
    min_gain: float = MIN_GAIN
    tolerance: float = PLATEAU_TOLERANCE
    max_finalists: int = 3
    seed: int = 0
    # shares of the budget the phases may run up to
    scan_share: float = 0.5
    knobs_share: float = 0.65


@dataclass
class Region:
    name: str  # "cpu-bound" | "latency-bound" | "overhead-bound"
    reason: str
    predicted_workers: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reason": self.reason,
            "predicted_workers": None if self.predicted_workers is None else round(self.predicted_workers, 1),
        }


@dataclass
class Effect:
    """A knob's measured effect: ``variant`` vs ``parent`` (same run, same phase)."""

    knob: str
    parent: LoaderConfig
    variant: LoaderConfig
    parent_rate: float
    variant_rate: float
    source: str  # "scan" (single measurements) or "confirm" (interleaved medians)

    @property
    def gain(self) -> float:
        return self.variant_rate / self.parent_rate - 1 if self.parent_rate > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "knob": self.knob,
            "parent": self.parent.label(),
            "variant": self.variant.label(),
            "parent_samples_per_s": round(self.parent_rate, 2),
            "variant_samples_per_s": round(self.variant_rate, 2),
            "gain": round(self.gain, 4),
            "source": self.source,
        }


@dataclass
class Decision:
    """The pick among raced configs and how sure it is."""

    pick: LoaderConfig
    leader: LoaderConfig
    medians: dict[LoaderConfig, float]
    confidence: float
    runner_up: LoaderConfig | None = None
    margin: float | None = None  # pick median / runner-up median
    margin_interval: tuple[float, float] | None = None  # 90% bootstrap interval of the margin


@dataclass
class SearchResult:
    pick: LoaderConfig
    samples_per_s: float
    baseline: LoaderConfig
    baseline_samples_per_s: float
    confidence: float
    region: Region
    trials: list[Trial]
    effects: list[Effect]
    notes: list[str]
    elapsed_s: float
    runner_up: LoaderConfig | None = None
    margin: float | None = None
    margin_interval: tuple[float, float] | None = None
    finalists: dict[str, float] = field(default_factory=dict)  # label -> median rate in the race
    rounds: int = 0
    noise: float | None = None  # median relative spread of raced configs
    startup_s: float | None = None  # the pick's measured start-up (time to first batch)
    memory: MemoryBudget | None = None

    @property
    def speedup(self) -> float | None:
        if self.baseline_samples_per_s <= 0:
            return None
        return self.samples_per_s / self.baseline_samples_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "pick": self.pick.to_dict(),
            "samples_per_s": round(self.samples_per_s, 2),
            "baseline": self.baseline.to_dict(),
            "baseline_samples_per_s": round(self.baseline_samples_per_s, 2),
            "speedup": None if self.speedup is None else round(self.speedup, 3),
            "confidence": round(self.confidence, 3),
            "region": self.region.to_dict(),
            "runner_up": None if self.runner_up is None else self.runner_up.label(),
            "margin": _round(self.margin, 4),
            "margin_interval": None if self.margin_interval is None else [round(v, 4) for v in self.margin_interval],
            "finalists": {k: round(v, 2) for k, v in self.finalists.items()},
            "rounds": self.rounds,
            "noise": _round(self.noise, 4),
            "startup_s": _round(self.startup_s, 4),
            "elapsed_s": round(self.elapsed_s, 3),
            "notes": list(self.notes),
            "effects": [e.to_dict() for e in self.effects],
            "trials": [t.to_dict() for t in self.trials],
            "memory": None if self.memory is None else self.memory.to_dict(),
        }


# -- pure decisions ---------------------------------------------------------------------


def classify(profile: Profile, r0: float, rc: float | None, cores: int, batch_size: int) -> Region:
    """The region of the worker-count curve the cheap measurements point to.

    ``r0`` is the measured single-process rate, ``rc`` the rate with
    ``cores`` workers (None when it could not be measured).
    """
    cpu = max(profile.cpu_per_wall, 1e-3)
    if profile.cpu_per_wall < LATENCY_CPU_FRACTION:
        predicted = cores / cpu
        return Region(
            "latency-bound",
            f"the fetch used {profile.cpu_per_wall:.0%} of a CPU per second of wall time, so it mostly waits "
            f"(I/O, sleep, GIL released); about {predicted:.0f} workers could keep {cores} core(s) busy",
            predicted_workers=predicted,
        )
    batch_s = profile.batch_seconds(batch_size)
    no_gain = rc is not None and r0 > 0 and rc < r0 * 1.1
    if batch_s < OVERHEAD_BATCH_S or no_gain:
        why = (
            f"a batch costs {batch_s * 1000:.2f} ms in-process, comparable to moving it between processes"
            if batch_s < OVERHEAD_BATCH_S
            else f"{cores} workers gave {rc / r0 if r0 else 0:.2f}x the single-process rate"
        )
        return Region("overhead-bound", why, predicted_workers=1.0)
    return Region(
        "cpu-bound",
        f"the fetch used {profile.cpu_per_wall:.0%} of a CPU per second of wall time, so throughput scales "
        f"with the {cores} usable core(s)",
        predicted_workers=float(cores),
    )


def cost_key(config: LoaderConfig) -> tuple:
    """Preferred first among equals: fewer workers, shallower prefetch, ordered, default threads,
    smaller batches, pinned memory (a loader-only measurement cannot see the faster host-to-device
    copy it buys, so pinning stays unless it measurably costs), batched fetching."""
    return (
        config.num_workers,
        config.prefetch_factor or 0,
        0 if config.in_order else 1,
        0 if config.torch_threads is None else 1,
        config.batch_size,
        0 if config.pin_memory else 1,
        0 if config.batched_fetch else 1,
    )


def _bootstrap_medians(values: Sequence[float], rng: random.Random, n: int) -> list[float]:
    k = len(values)
    return [statistics.median(rng.choices(values, k=k)) for _ in range(n)]


def decide(
    samples: dict[LoaderConfig, list[float]],
    *,
    tolerance: float = PLATEAU_TOLERANCE,
    bar: float = BAR,
    seed: int = 0,
    resamples: int = 1000,
) -> Decision:
    """Pick among raced configs: the leader, or a cheaper one within ``tolerance`` of it.

    Confidence is the bootstrap probability (resampling each config's repeats)
    that the pick's median reaches ``bar`` × every rival's median.
    """
    medians = {c: statistics.median(v) for c, v in samples.items() if v}
    if not medians:
        raise ValueError("decide() needs at least one config with samples")
    leader = max(medians, key=lambda c: medians[c])
    top = medians[leader]
    eligible = [c for c in medians if medians[c] >= top * (1 - tolerance)]
    pick = min(eligible, key=cost_key)
    rivals = [c for c in medians if c != pick]
    rng = random.Random(seed)
    if not rivals:
        return Decision(pick=pick, leader=leader, medians=medians, confidence=1.0)
    boot = {c: _bootstrap_medians(samples[c], rng, resamples) for c in [pick, *rivals]}
    wins = sum(
        1 for i in range(resamples) if all(boot[pick][i] >= bar * boot[c][i] for c in rivals)
    )
    runner_up = max(rivals, key=lambda c: medians[c])
    ratios = sorted(boot[pick][i] / boot[runner_up][i] for i in range(resamples) if boot[runner_up][i] > 0)
    interval = (ratios[int(0.05 * len(ratios))], ratios[int(0.95 * len(ratios)) - 1]) if ratios else None
    return Decision(
        pick=pick,
        leader=leader,
        medians=medians,
        confidence=wins / resamples,
        runner_up=runner_up,
        margin=medians[pick] / medians[runner_up] if medians[runner_up] > 0 else None,
        margin_interval=interval,
    )


def clearly_slower(
    candidate: Sequence[float], leader: Sequence[float], *, tolerance: float, seed: int = 0, resamples: int = 400
) -> bool:
    """Whether ``candidate`` is slower than ``leader`` beyond the noise (90% bootstrap upper bound)."""
    rng = random.Random(seed)
    a = _bootstrap_medians(list(candidate), rng, resamples)
    b = _bootstrap_medians(list(leader), rng, resamples)
    ratios = sorted(x / y for x, y in zip(a, b) if y > 0)
    if not ratios:
        return False
    upper = ratios[int(0.95 * len(ratios)) - 1]
    return upper < 1 - tolerance


def single_measurement_confidence(pick: Trial, rivals: Sequence[Trial], *, bar: float = BAR, noise_floor: float = 0.03) -> float:
    """Confidence from single measurements (no race): a normal approximation on log rates."""
    if not rivals:
        return 1.0
    prob = 1.0
    for rival in rivals:
        if not rival.ok:
            continue
        sd = math.sqrt((pick.rel_se or noise_floor) ** 2 + (rival.rel_se or noise_floor) ** 2 + noise_floor**2)
        z = (math.log(pick.samples_per_s / rival.samples_per_s) - math.log(bar)) / sd
        prob = min(prob, 0.5 * (1 + math.erf(z / math.sqrt(2))))
    return prob


# -- the search -------------------------------------------------------------------------


class Search:
    """One tuning run: phases of NOTE [tuning strategy] over an evaluator."""

    def __init__(
        self,
        evaluator: Evaluator,
        space: SearchSpace,
        profile: Profile,
        *,
        baseline: LoaderConfig,
        memory: MemoryBudget,
        settings: SearchSettings | None = None,
        on_trial: Callable[[Trial], None] | None = None,
    ) -> None:
        self.ev = evaluator
        self.space = space
        self.profile = profile
        self.baseline = baseline
        self.memory = memory
        self.settings = settings or SearchSettings()
        self.on_trial = on_trial
        self.trials: list[Trial] = []
        self.notes: list[str] = []
        self.effects: list[Effect] = []
        self.region = Region("cpu-bound", "not classified yet")
        self._scan: dict[LoaderConfig, Trial] = {}
        self._race: dict[LoaderConfig, list[float]] = {}
        self._rounds = 0
        self._template = LoaderConfig(
            num_workers=1,
            batch_size=space.batch_size,
            prefetch_factor=min(space.prefetch_factors) if space.prefetch_factors else 2,
            pin_memory=space.pin_memory,
            multiprocessing_context=space.multiprocessing_context,
        )

    # -- helpers ---------------------------------------------------------------------
    def workers(self, n: int, **changes: Any) -> LoaderConfig:
        return self._template.replace(num_workers=n, **changes)

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _sig(self, *trials: Trial) -> float:
        """The gain that counts as real: the floor, or twice the combined window noise (capped:
        when unsure, one more step up costs a measurement, stopping early can cost the optimum)."""
        se = math.sqrt(sum((t.rel_se or 0.0) ** 2 for t in trials))
        return max(self.settings.min_gain, min(2 * se, MAX_SIG))

    def rate(self, config: LoaderConfig) -> float:
        if config in self._race and self._race[config]:
            return statistics.median(self._race[config])
        trial = self._scan.get(config)
        return trial.samples_per_s if trial is not None and trial.ok else 0.0

    def estimate_cost(self, config: LoaderConfig, window_s: float) -> float:
        """Seconds a measurement of ``config`` will take, from what earlier ones took.

        Overhead (start-up, warm-up, shutdown) is fitted as ``a + b × workers``
        over past trials; the window stretches to ``min_batches`` batches at
        the rate of the nearest measured config with no more workers.
        """
        a, b = self._overhead_fit()
        rate = self._rate_guess(config)
        window = window_s
        if rate > 0:
            window = max(window_s, self.settings.min_batches * config.batch_size / rate)
        return window + a + b * config.num_workers

    def _overhead_fit(self) -> tuple[float, float]:
        points = [(t.config.num_workers, max(0.0, t.cost_s - (t.window_s or 0.0))) for t in self.trials]
        if not points:
            return 0.2, 0.05
        ws = {w for w, _ in points}
        if len(ws) < 2:
            w, y = max(points, key=lambda p: p[1])
            return (y, 0.05) if w == 0 else (0.2, y / w)
        n = len(points)
        mean_w = sum(w for w, _ in points) / n
        mean_y = sum(y for _, y in points) / n
        var = sum((w - mean_w) ** 2 for w, _ in points)
        slope = max(0.0, sum((w - mean_w) * (y - mean_y) for w, y in points) / var)
        intercept = max(0.0, mean_y - slope * mean_w)
        # Pad by the worst residual: an estimate that runs short overshoots the budget.
        worst = max(y - (intercept + slope * w) for w, y in points)
        return intercept + max(0.0, worst), slope

    def _rate_guess(self, config: LoaderConfig) -> float:
        known = self.rate(config)
        if known > 0:
            return known
        below = [t.samples_per_s for c, t in self._scan.items() if t.ok and c.num_workers <= config.num_workers]
        return max(below) if below else 0.0

    def affordable(self, seconds: float, share: float = 1.0) -> bool:
        return self.ev.elapsed() + seconds <= self.settings.budget_s * share

    def worker_cap(self, prefetch_factor: int = 2) -> int:
        return max(0, min(self.space.max_workers, self.memory.max_workers(prefetch_factor)))

    def measure(self, config: LoaderConfig, phase: str, *, share: float = 1.0, force: bool = False) -> Trial | None:
        """Measure once (or reuse the scan result); None when the budget or memory says no."""
        if config in self._scan:
            return self._scan[config]
        if not force and not self.memory.fits(config):
            self._note(
                f"skipped {config.label()}: needs about {self.memory.need(config) / MB:.0f} MB, "
                f"over the {self.memory.budget_bytes / MB:.0f} MB memory budget"
            )
            return None
        window = self.settings.scan_window_s
        if not force and not self.affordable(self.estimate_cost(config, window), share):
            self._note(f"time budget: did not measure {config.label()} in the {phase} phase")
            return None
        trial = self.ev.measure(config, window_s=window, phase=phase)
        self._record(trial)
        self._scan[config] = trial
        return trial

    def _record(self, trial: Trial) -> None:
        self.trials.append(trial)
        if trial.config.num_workers > 0:
            self.memory.observe(trial.worker_bytes)
        if trial.error:
            self._note(f"{trial.config.label()} failed: {trial.error}")
        if self.on_trial is not None:
            self.on_trial(trial)

    def _scanned_worker_counts(self) -> dict[int, float]:
        """Rate per worker count among plain worker configs (the template's other knobs)."""
        out: dict[int, float] = {}
        for config, trial in self._scan.items():
            if trial.ok and config == self.workers(config.num_workers):
                out[config.num_workers] = trial.samples_per_s
        return out

    def best_scanned(self, predicate: Callable[[LoaderConfig], bool] = lambda c: True) -> LoaderConfig | None:
        found = [(t.samples_per_s, c) for c, t in self._scan.items() if t.ok and predicate(c)]
        if not found:
            return None
        return max(found, key=lambda pair: pair[0])[1]

    # -- phases ----------------------------------------------------------------------
    def run(self) -> SearchResult:
        self._probe()
        self._scale()
        self._refine()
        self._knobs()
        decision = self._confirm()
        self._startup(decision.pick)
        return self._result(decision)

    def _probe(self) -> None:
        self.measure(self.baseline, "baseline", force=True)
        zero = self.workers(0)
        if zero != self.baseline:
            self.measure(zero, "probe", force=True)
        # Cheap and often decisive for in-memory data: batched fetching, when the profile saw a gain.
        if self.space.batched_fetch and (self.profile.batched_speedup or 0.0) >= 1.5:
            self._try_variant("batched_fetch", zero, zero.replace(batched_fetch=True), self.settings.scan_share, "probe")

    def _scale(self) -> None:
        share = self.settings.scan_share
        zero = self.workers(0)
        r0 = self.rate(zero)
        cap = self.worker_cap(self._template.prefetch_factor or 2)
        if cap < 1:
            self._note(
                "num_workers is limited to 0 here" if self.space.max_workers < 1
                else "the memory budget leaves no room for a worker process; staying single-process"
            )
            self.region = classify(self.profile, r0, None, self.space.cores, self.space.batch_size)
            return
        start = min(self.space.cores, cap)
        first = self.measure(self.workers(start), "scale", share=share)
        rc = first.samples_per_s if first is not None and first.ok else None
        self.region = classify(self.profile, r0, rc, self.space.cores, self.space.batch_size)
        if rc is None:
            return
        if start > 1 and rc < r0 * (1 + self.settings.min_gain):
            self.measure(self.workers(1), "scale", share=share)
        gain = rc / r0 if r0 > 0 else float(start)
        self._climb(start, last_gain=gain, last_factor=float(max(1, start)), share=share)

    def _climb_factor(self, current: int, last_gain: float, last_factor: float) -> int:
        predicted = self.region.predicted_workers or 0.0
        near_linear = last_gain >= 0.6 * last_factor
        if self.region.name == "latency-bound" and predicted >= 4 * current and near_linear:
            return 4
        return 2

    def _climb(self, current: int, *, last_gain: float, last_factor: float, share: float) -> None:
        """Grow the worker count geometrically while each step gains more than the noise."""
        while True:
            cap = self.worker_cap(self._template.prefetch_factor or 2)
            factor = self._climb_factor(current, last_gain, last_factor)
            nxt = min(current * factor, cap)
            if nxt <= current:
                if cap <= current:
                    self._note(f"worker count capped at {cap} (max workers / memory budget)")
                return
            here = self._scan[self.workers(current)]
            trial = self.measure(self.workers(nxt), "climb", share=share)
            if trial is None or not trial.ok:
                return
            gain = trial.samples_per_s / here.samples_per_s if here.samples_per_s > 0 else 0.0
            if gain < 1 + self._sig(here, trial):
                return  # plateau or decline: refine between the neighbours instead
            current, last_gain, last_factor = nxt, gain, float(nxt) / current

    def _refine(self, rounds: int = 3) -> None:
        share = self.settings.scan_share
        for _ in range(rounds):
            scanned = self._scanned_worker_counts()
            if not scanned:
                return
            best = max(scanned, key=lambda w: scanned[w])
            lower = [w for w in scanned if w < best]
            upper = [w for w in scanned if w > best]
            mids = []
            for neighbour in (max(lower) if lower else None, min(upper) if upper else None):
                if neighbour is None:
                    continue
                lo, hi = sorted((neighbour, best))
                if lo == 0:
                    mid = hi // 2 if hi >= 2 else None
                elif hi / lo >= REFINE_RATIO:
                    mid = int(round(math.sqrt(lo * hi)))
                else:
                    mid = None
                if mid is not None and lo < mid < hi and mid not in scanned:
                    mids.append(mid)
            if not mids:
                return
            for mid in mids:
                if self.measure(self.workers(mid), "refine", share=share) is None:
                    return

    def _jittery(self) -> bool:
        # Only the in-process per-item times: inter-batch waits with many workers are bursty by nature.
        return self.profile.jittery

    def _try_variant(
        self, knob: str, parent: LoaderConfig, variant: LoaderConfig, share: float, phase: str = "knobs"
    ) -> Trial | None:
        if variant == parent or variant in self._scan:
            return self._scan.get(variant)
        trial = self.measure(variant, phase, share=share)
        parent_trial = self._scan.get(parent)
        if trial is not None and trial.ok and parent_trial is not None and parent_trial.ok:
            self.effects.append(
                Effect(knob, parent, variant, parent_trial.samples_per_s, trial.samples_per_s, "scan")
            )
        return trial

    def _improves(self, variant: LoaderConfig, parent: LoaderConfig) -> bool:
        a, b = self._scan.get(variant), self._scan.get(parent)
        if a is None or b is None or not a.ok or not b.ok:
            return False
        return a.samples_per_s > b.samples_per_s * (1 + self._sig(a, b) / 2)

    def _knobs(self) -> None:
        share = self.settings.knobs_share
        best = self.best_scanned(lambda c: c == self.workers(c.num_workers))
        if best is None:
            return
        space = self.space
        if best.num_workers > 0:
            # A continuously consumed loader gains from deeper prefetch only when batch times vary:
            # the whole ladder for jittery sources, one cheap probe otherwise.
            deeper = sorted(p for p in space.prefetch_factors if p > (best.prefetch_factor or 2))
            if not self._jittery():
                deeper = deeper[:1] if best.num_workers <= 2 * space.cores else []
            for pf in deeper:
                variant = best.replace(prefetch_factor=pf)
                self._try_variant("prefetch_factor", best, variant, share)
                if not self._improves(variant, best):
                    break
                best = variant
            if space.in_order and best.num_workers > 1:
                # Worth one probe even when per-item times look steady: decode times that
                # vary a little still stall an in-order loader behind its slowest worker.
                self._try_variant("in_order", best, best.replace(in_order=False), share)
        if space.batched_fetch:
            zero = self.workers(0)
            self._try_variant("batched_fetch", zero, zero.replace(batched_fetch=True), share)
            if best.num_workers > 0:
                self._try_variant("batched_fetch", best, best.replace(batched_fetch=True), share)
        single = self.best_scanned(lambda c: c.num_workers == 0)
        if space.threads and single is not None and self._near_top(single):
            for n in space.threads:
                self._try_variant("torch_threads", single, single.replace(torch_threads=n), share)
        top = self.best_scanned() or best
        if space.pin_memory:
            self._try_variant("pin_memory", top, top.replace(pin_memory=not top.pin_memory), share)
        for bs in space.batch_sizes:
            self._try_variant("batch_size", top, top.replace(batch_size=bs), share)

    def _near_top(self, config: LoaderConfig, within: float = 0.25) -> bool:
        best = self.best_scanned()
        return best is not None and self.rate(config) >= self.rate(best) * (1 - within)

    # -- the race --------------------------------------------------------------------
    def finalists(self) -> list[LoaderConfig]:
        """The best few scanned configs, plus the cheapest one within a few percent of the best."""
        ranked = sorted(((t.samples_per_s, c) for c, t in self._scan.items() if t.ok), key=lambda p: -p[0])
        if not ranked:
            return []
        top = ranked[0][0]
        limit = max(2, self.settings.max_finalists)
        chosen = [c for r, c in ranked if r >= top * 0.9][:limit]
        # Single measurements can mislead on a busy machine: the runner-up races too (it also gives
        # the noise estimate behind the confidence), unless it is not even half as fast.
        if len(chosen) == 1 and len(ranked) > 1 and ranked[1][0] >= 0.5 * top:
            chosen.append(ranked[1][1])
        # A plateau: the cheapest config within noise of the best may be worth fewer processes.
        cheapest = min((c for r, c in ranked if r >= top * (1 - 2 * self.settings.min_gain)), key=cost_key)
        if cheapest not in chosen:
            chosen = chosen[: limit - 1] + [cheapest]
        return chosen

    def _round_cost(self, configs: Sequence[LoaderConfig]) -> float:
        return 2 * sum(self.estimate_cost(c, self.settings.confirm_window_s) for c in configs)

    def _confirm(self) -> Decision:
        settings = self.settings
        alive = self.finalists()
        base_trial = self._scan.get(self.baseline)
        top = max((t.samples_per_s for t in self._scan.values() if t.ok), default=0.0)
        # Race the baseline once for an interleaved speed-up, unless the scan already shows it far behind.
        baseline_pending = (
            self.baseline not in alive
            and base_trial is not None
            and base_trial.ok
            and base_trial.samples_per_s >= 0.5 * top
        )
        while alive:
            configs = alive + ([self.baseline] if baseline_pending else [])
            if len(configs) == 1:
                break
            if not self.affordable(self._round_cost(configs)):
                if baseline_pending and len(alive) > 1 and self.affordable(self._round_cost(alive)):
                    baseline_pending = False  # the speed-up then comes from the scan
                    continue
                self._note(f"time budget: stopped the confirmation race after {self._rounds} round(s)")
                break
            results = self.ev.interleaved(configs, repeats=1, window_s=settings.confirm_window_s, phase="confirm")
            for config, trials in zip(configs, results):
                for trial in trials:
                    self._record(trial)
                    if trial.ok:
                        self._race.setdefault(config, []).append(trial.samples_per_s)
                    elif config in alive:
                        alive.remove(config)
            self._rounds += 1
            if baseline_pending:
                baseline_pending = False
                # The user's own config stays in the race when it is within reach of the leader.
                leader = max((statistics.median(self._race[c]) for c in alive if self._race.get(c)), default=0.0)
                base = self._race_median(self.baseline)
                if base is not None and base >= leader * (1 - 2 * settings.min_gain):
                    alive.append(self.baseline)
            if settings.rounds is not None:
                if self._rounds >= settings.rounds:
                    break
                continue
            if self._rounds < settings.min_rounds:
                continue
            raced = {c: self._race[c] for c in alive if self._race.get(c)}
            if not raced:
                break
            decision = decide(raced, tolerance=settings.tolerance, seed=settings.seed + self._rounds)
            leader_samples = self._race[decision.leader]
            alive = [
                c
                for c in alive
                if c in (decision.leader, decision.pick)
                or not clearly_slower(self._race[c], leader_samples, tolerance=settings.tolerance, seed=settings.seed)
            ]
            if decision.confidence >= 0.9 or len(alive) <= 1 or self._rounds >= settings.max_rounds:
                break
        raced = {c: v for c, v in self._race.items() if v}
        if raced:
            return decide(raced, tolerance=settings.tolerance, seed=settings.seed)
        return self._decide_from_scan()

    def _decide_from_scan(self) -> Decision:
        ok = {c: t for c, t in self._scan.items() if t.ok}
        if not ok:
            return Decision(pick=self.baseline, leader=self.baseline, medians={}, confidence=0.0)
        leader = max(ok, key=lambda c: ok[c].samples_per_s)
        top = ok[leader].samples_per_s
        pick = min((c for c in ok if ok[c].samples_per_s >= top * (1 - self.settings.tolerance)), key=cost_key)
        rivals = [t for c, t in ok.items() if c != pick]
        runner = max(rivals, key=lambda t: t.samples_per_s) if rivals else None
        return Decision(
            pick=pick,
            leader=leader,
            medians={c: t.samples_per_s for c, t in ok.items()},
            confidence=single_measurement_confidence(ok[pick], rivals),
            runner_up=runner.config if runner else None,
            margin=ok[pick].samples_per_s / runner.samples_per_s if runner else None,
        )

    # -- start-up ------------------------------------------------------------------
    def _startup_pair(self, pick: LoaderConfig, ctx: str) -> tuple[LoaderConfig, LoaderConfig]:
        """Start methods are compared at min(workers, cores): start-up per worker, cheaply."""
        n = max(1, min(pick.num_workers, self.space.cores))
        parent = self.workers(n)
        return parent, parent.replace(multiprocessing_context=ctx)

    def _startup(self, pick: LoaderConfig) -> None:
        """Time to first batch under other start methods (paid every epoch without persistent workers)."""
        if pick.num_workers == 0 or not self.space.contexts:
            return
        # Persistent workers pay start-up once per run: only worth measuring with budget to spare.
        if self.ev.elapsed() > 0.75 * self.settings.budget_s:
            self._note("time budget: did not compare start methods")
            return
        for ctx in self.space.contexts:
            parent, variant = self._startup_pair(pick, ctx)
            own = self._scan.get(parent)
            if own is None or not own.ok or variant in self._scan:
                continue
            # Other start methods may import the pipeline anew in every worker: budget generously.
            if not self.affordable(self.estimate_cost(variant, self.settings.scan_window_s) + 5 * (own.startup_s or 0.5)):
                self._note("time budget: did not compare start methods")
                return
            trial = self.ev.measure(variant, window_s=self.settings.scan_window_s, phase="startup")
            self._record(trial)
            self._scan[variant] = trial

    # -- result --------------------------------------------------------------------
    def _result(self, decision: Decision) -> SearchResult:
        pick = decision.pick
        rate = decision.medians.get(pick, self.rate(pick))
        base_rate = self._race_median(self.baseline) or self.rate(self.baseline)
        self._race_effects()
        startup = self._startup_of(pick)
        pick = self._apply_startup_choices(pick, startup)
        noise = [
            (max(v) - min(v)) / statistics.median(v) for v in self._race.values() if len(v) >= 2 and statistics.median(v) > 0
        ]
        return SearchResult(
            pick=pick,
            samples_per_s=rate,
            baseline=self.baseline,
            baseline_samples_per_s=base_rate,
            confidence=decision.confidence,
            region=self.region,
            trials=self.trials,
            effects=self.effects,
            notes=self.notes,
            elapsed_s=self.ev.elapsed(),
            runner_up=decision.runner_up,
            margin=decision.margin,
            margin_interval=decision.margin_interval,
            finalists={c.label(): m for c, m in sorted(decision.medians.items(), key=lambda p: -p[1])},
            rounds=self._rounds,
            noise=statistics.median(noise) if noise else None,
            startup_s=startup,
            memory=self.memory,
        )

    def _race_median(self, config: LoaderConfig) -> float | None:
        values = self._race.get(config)
        return statistics.median(values) if values else None

    def _race_effects(self) -> None:
        """Replace single-measurement effects by interleaved medians where both sides raced."""
        for effect in self.effects:
            a, b = self._race_median(effect.parent), self._race_median(effect.variant)
            if a is not None and b is not None:
                effect.parent_rate, effect.variant_rate, effect.source = a, b, "confirm"

    def _startup_of(self, config: LoaderConfig) -> float | None:
        values = [t.startup_s for t in self.trials if t.config == config and t.ok and t.startup_s is not None]
        return statistics.median(values) if values else None

    def _apply_startup_choices(self, pick: LoaderConfig, startup: float | None) -> LoaderConfig:
        if pick.num_workers == 0:
            return pick
        # A start method must start clearly faster (25% and 0.1 s at the same worker count) to replace the default.
        for ctx in self.space.contexts:
            parent, variant = self._startup_pair(pick, ctx)
            a, b = self._scan.get(parent), self._scan.get(variant)
            if a is None or b is None or not a.ok or not b.ok or a.startup_s is None or b.startup_s is None:
                continue
            if b.startup_s < a.startup_s * 0.75 and a.startup_s - b.startup_s >= 0.1:
                self._note(
                    f"start method {ctx!r} reached the first batch in {b.startup_s:.2f} s vs {a.startup_s:.2f} s "
                    f"with {parent.num_workers} workers"
                )
                pick = pick.replace(multiprocessing_context=ctx)
                break
        if self.space.persistent_workers and not pick.persistent_workers:
            if startup is not None:
                self._note(
                    f"persistent_workers=True: the measured start-up of {startup:.2f} s is paid once instead of every epoch"
                )
            pick = pick.replace(persistent_workers=True)
        return pick


def run_search(
    evaluator: Evaluator,
    space: SearchSpace,
    profile: Profile,
    *,
    baseline: LoaderConfig,
    memory: MemoryBudget,
    settings: SearchSettings | None = None,
    on_trial: Callable[[Trial], None] | None = None,
) -> SearchResult:
    """Run the strategy of NOTE [tuning strategy]; see :class:`Search`."""
    return Search(
        evaluator, space, profile, baseline=baseline, memory=memory, settings=settings, on_trial=on_trial
    ).run()


# -- a simulated evaluator (tests, dry runs) ------------------------------------------------


class SimulatedEvaluator(InterleavingEvaluator):
    """An :class:`Evaluator` over a rate function, with multiplicative noise and a fake clock.

    ``rate_fn(config) -> samples/s`` is the truth; each measurement returns it
    times ``exp(N(0, noise))`` and advances the clock by the window plus a
    start-up of ``startup_fn(config)`` seconds. Deterministic for a seed.
    """

    def __init__(
        self,
        rate_fn: Callable[[LoaderConfig], float],
        *,
        noise: float = 0.02,
        seed: int = 0,
        startup_fn: Callable[[LoaderConfig], float] | None = None,
        worker_bytes_fn: Callable[[LoaderConfig], int | None] | None = None,
        overhead_s: float = 0.05,
    ) -> None:
        self.rate_fn = rate_fn
        self.noise = noise
        self.rng = random.Random(seed)
        self.startup_fn = startup_fn or (lambda c: 0.05 + 0.03 * c.num_workers)
        self.worker_bytes_fn = worker_bytes_fn or (lambda c: None)
        self.overhead_s = overhead_s
        self.clock = 0.0
        self.measured: list[LoaderConfig] = []

    def elapsed(self) -> float:
        return self.clock

    def measure(self, config: LoaderConfig, *, window_s: float, phase: str) -> Trial:
        true = self.rate_fn(config)
        startup = self.startup_fn(config)
        cost = window_s + startup + self.overhead_s
        self.clock += cost
        self.measured.append(config)
        noisy = true * math.exp(self.rng.gauss(0.0, self.noise)) if true > 0 else 0.0
        return Trial(
            config=config,
            samples_per_s=noisy,
            phase=phase,
            startup_s=startup,
            window_s=window_s,
            rel_se=self.noise / 2,
            worker_bytes=self.worker_bytes_fn(config) if config.num_workers else None,
            cost_s=cost,
            error=None if true > 0 else "simulated failure",
        )

