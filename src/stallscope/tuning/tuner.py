"""``ss.tune``: the fastest loader config within a time budget (SPEC §2.2, §5 ``tune``, §7, §8).

The parts:

* :func:`~.profiling.profile_pipeline` (:mod:`.profiling`) — cheap in-process numbers: wall and CPU
  time per sample (CPU / wall far below 1 means the fetch waits, so more workers than
  cores help), collate time, batch bytes, jitter, and whether a vectorised
  batch fetch exists and what it saves.
* :class:`LoaderEvaluator` — measurements of real DataLoaders through
  :func:`stallscope.throughput.measure.measure` (steady state, start-up apart), under
  the time budget; a failing config becomes a failed trial, not a crash.
* :mod:`stallscope.tuning.search` — the strategy (NOTE [tuning strategy]).
* The result records measurements only; :mod:`stallscope.analysis.tune_rules` turns
  them into recommendations, each with the measured gain (``ss.tune(...).recommendations()``,
  on the library surface: :mod:`stallscope.api`).
"""

from __future__ import annotations

import math
import multiprocessing
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from ..checks.sharding import replayed_stream
from ..config import LoaderConfig, loader_supports
from ..errors import PipelineError, UsageError
from ..loader_call import LoaderCall
from ..pipeline.batching import FetcherCheck
from ..pipeline.kinds import LoaderKind
from ..pipeline.preflight import preflight
from ..runtime.host import cuda_available, usable_cores
from ..runtime.processes import no_orphans
from ..target import Pipeline, load_target
from ..thresholds import MEMORY_BUDGET_SHARE
from ..throughput.epochs import EpochGap, epoch_gap
from ..throughput.sweep import within_epoch
from .profiling import profile_loader, profile_pipeline
from .search import Search
from .space import MB, MemoryBudget, Profile, SearchSettings, SearchSpace
from .threads import thread_eligibility
from .trial import Evaluator, SearchResult, Trial

DEFAULT_BUDGET_S = 60.0


def limit_space(space: SearchSpace, kind: LoaderKind) -> None:
    """Turn off what this loader kind cannot set, and add the values its own knobs may take
    (NOTE [loader kinds])."""
    if kind.rebuilds_from_parts:
        return
    knobs = kind.knobs
    if "num_workers" not in knobs:
        space.max_workers = 0
    if "prefetch_factor" not in knobs:
        space.prefetch_factors = ()
    space.in_order = space.in_order and "in_order" in knobs
    space.batched_fetch = space.batched_fetch and "batched_fetch" in knobs
    space.pin_memory = space.pin_memory and "pin_memory" in knobs
    if "torch_threads" not in knobs:
        space.threads = ()
    if "worker_threads" not in knobs:
        space.worker_threads = ()
    elif kind.name == "factory":
        space.worker_threads = (2, 4, 8, 16, 32)  # the factory's own thread parameter
    if "batch_size" not in knobs:
        space.batch_sizes = ()
    if "multiprocessing_context" not in knobs:
        space.contexts = ()
    space.persistent_workers = space.persistent_workers and "persistent_workers" in knobs
    space.worker_methods = tuple(kind.choices.get("worker_method", ()))
    space.snapshot_steps = tuple(kind.choices.get("snapshot_every_n_steps", ()))


def limit_to_factory(space: SearchSpace, call: LoaderCall) -> str:
    """Keep to what a call of the user's factory can set (NOTE [a DataLoader's factory] in
    render/loader_snippet.py): its own parameters, and the knobs a DataLoader takes once built.
    ``persistent_workers`` it does not take is measured, and advised on its own, not picked; a
    fetch of stallscope's (batched, threaded) would replace the factory's DataLoader, so is not
    tried. Returns the plan's note."""
    takes = sorted(call.factory_parameters)
    fields = set(call.factory_parameters.values())
    space.persistent_in_pick = "persistent_workers" in fields
    if "batch_size" not in fields:
        space.batch_sizes = ()
    space.batched_fetch = False
    space.worker_threads, space.thread_gate = (), None
    name = call.origin_name or "the factory"
    return (
        f"the loader comes from {name}(), which takes {', '.join(takes)}: trials vary what it "
        "takes and what a DataLoader lets you set once built, so the advice is a call to it"
        + ("" if space.persistent_in_pick else "; persistent_workers is measured and advised apart")
    )


# -- measuring real loaders ------------------------------------------------------------------


class LoaderEvaluator(Evaluator):
    """The search's :class:`~stallscope.tuning.trial.Evaluator` over real DataLoaders."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        budget_s: float,
        started: float | None = None,
        timeout: float | None = None,
        seed: int = 0,
        on_trial: Callable[[Trial], None] | None = None,
        min_batches: int = 8,
    ) -> None:
        self.pipeline = pipeline
        self.min_batches = min_batches
        self.budget_s = budget_s
        self.started = time.perf_counter() if started is None else started
        # A hung sample must not eat the whole budget (SPEC §7: never hangs).
        self.timeout = timeout if timeout is not None else max(5.0, min(30.0, budget_s / 3))
        self.seed = seed
        self.on_trial = on_trial
        self._memory_sampled = False
        # Configs whose workers' memory was measured (NOTE [memory budget] in space.py).
        self._memory_of: set[LoaderConfig] = set()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def _max_window(self, window_s: float) -> float:
        left = self.budget_s - self.elapsed()
        return max(window_s, min(10.0, left / 4))

    def measure(
        self, config: LoaderConfig, *, window_s: float, phase: str, position: float = 0.0
    ) -> Trial:
        from ..throughput.measure import latency_stats, measure
        from ..throughput.sweep import loader_cpu_ms_per_sample, main_ms_per_batch

        # The first measurement of every worker config samples its workers' memory (the budget
        # bounds what was measured); the first of all gets a window long enough for a USS reading.
        sample = config.num_workers > 0 and config not in self._memory_of
        window = max(window_s, 1.0) if sample and not self._memory_sampled else window_s
        timeout = self.timeout
        if phase == "startup":
            # An optional comparison: it may not outrun the budget, however slow the start method.
            # (stopping hung workers after a timeout takes a second or two more).
            timeout = max(1.0, min(timeout, self.budget_s - self.elapsed() - 2.0))
        t0 = time.perf_counter()
        try:
            m = measure(
                self.pipeline,
                config,
                min_window_s=window,
                max_window_s=self._max_window(window),
                min_batches=self.min_batches,
                timeout=timeout,
                sample_resources=sample,
                seed=self.seed,
                epoch_position=position,
            )
        except PipelineError as exc:
            return Trial(config, 0.0, phase, cost_s=time.perf_counter() - t0, error=str(exc))
        cost = time.perf_counter() - t0
        stats = latency_stats(m.batch_ms)
        workers_bytes = _workers_bytes(m)
        worker_bytes = None
        if workers_bytes is not None:
            self._memory_sampled = True
            self._memory_of.add(config)
            worker_bytes = workers_bytes // max(1, m.resources.n_workers if m.resources else 1)
        trial = Trial(
            config=config,
            samples_per_s=m.samples_per_s,
            phase=phase,
            startup_s=m.startup_s,
            window_s=m.window_s,
            batches=m.batches,
            batch_p50_ms=stats["p50"],
            batch_p95_ms=stats["p95"],
            rel_se=_relative_se(m.batch_ms),
            worker_bytes=worker_bytes,
            workers_bytes=workers_bytes,
            cost_s=cost,
            error=m.error,
            main_ms_per_batch=main_ms_per_batch([m]),
            cpu_ms_per_sample=loader_cpu_ms_per_sample([m]),
            epoch_samples=m.epoch_samples,
            epoch_batches=m.epoch_batches,
            restart_s=m.restart_s,
        )
        return trial

    def epoch_gap(self, config: LoaderConfig, *, epochs: int) -> EpochGap:
        t0 = time.perf_counter()
        try:
            return epoch_gap(self.pipeline, config, epochs=epochs, timeout=self.timeout)
        except PipelineError as exc:
            return EpochGap(config=config, cost_s=time.perf_counter() - t0, error=str(exc))


def _workers_bytes(m: Any) -> int | None:
    """The workers' memory in the window: the peak of their resident memory summed over them
    (NOTE [memory budget] in space.py: every page a worker maps, shared or copied, counts)."""
    res = m.resources
    if res is None or not res.n_workers or res.workers_rss_mb <= 0:
        return None
    return int(res.workers_rss_mb * MB)


def _relative_se(batch_ms: Sequence[float], chunks: int = 4) -> float | None:
    """Relative standard error of the window's rate, by batch means.

    Inter-batch waits with many workers are bursty and strongly correlated (a
    burst of ready batches, then a long wait), so their per-batch spread says
    little about the rate. The rates of ``chunks`` consecutive sub-windows do.
    """
    if len(batch_ms) < 4 * chunks:  # fewer batches: the estimate would be noise itself
        return None
    size = len(batch_ms) // chunks
    rates = []
    for i in range(chunks):
        part = batch_ms[i * size : (i + 1) * size]
        total = sum(part)
        if total <= 0:
            return None
        rates.append(len(part) / total)
    mean = statistics.fmean(rates)
    return statistics.stdev(rates) / mean / math.sqrt(chunks) if mean > 0 else None


# -- the search space for this host -----------------------------------------------------------


def default_max_workers(cores: int, epoch_batches: int | None) -> int:
    """``max(64, 8 × cores)`` capped at 256, and at the batches in one epoch (workers beyond them
    only wait: ``sweep.default_worker_counts``)."""
    return within_epoch(min(256, max(64, 8 * cores)), epoch_batches)


def start_method_alternatives() -> tuple[str, ...]:
    """Start methods worth comparing on start-up: forkserver where it is not the default.

    ``fork`` is never proposed where it is not already the default: platforms
    moved away from it because forking a threaded process is unsafe.
    """
    default = (
        multiprocessing.get_start_method(allow_none=True)
        or multiprocessing.get_context().get_start_method()
    )
    available = multiprocessing.get_all_start_methods()
    return tuple(m for m in ("forkserver",) if m in available and m != default)


def build_space(
    pipeline: Pipeline,
    profile: Profile,
    *,
    cores: int,
    max_workers: int | None = None,
    tune_batch_size: bool = False,
    compare_start_methods: bool = True,
) -> SearchSpace:
    import torch

    bs = pipeline.batch_size
    length = pipeline.length()
    sizes: tuple[int, ...] = ()
    if tune_batch_size:
        sizes = tuple(
            s
            for s in (bs // 2, bs * 2, bs * 4)
            if s >= 1 and s != bs and (length is None or s <= length)
        )
    threads = tuple(sorted({1, cores} - {torch.get_num_threads()})) if cores > 1 else ()
    epoch_batches = pipeline.batches_per_epoch()
    return SearchSpace(
        cores=cores,
        batch_size=bs,
        max_workers=max_workers
        if max_workers is not None
        else default_max_workers(cores, epoch_batches),
        in_order=loader_supports("in_order"),
        batched_fetch=profile.batched_fetch is not None,
        pin_memory=cuda_available(),
        threads=threads,
        batch_sizes=sizes,
        contexts=start_method_alternatives() if compare_start_methods else (),
        multiprocessing_context=pipeline.baseline.multiprocessing_context,
        epoch_batches=epoch_batches,
    )


# -- the result ----------------------------------------------------------------------------------


@dataclass
class TuneResult:
    """What ``ss.tune`` found. ``config`` is the pick; ``to_dict()`` gives the record sections of
    SPEC §5."""

    config: LoaderConfig
    samples_per_s: float
    baseline: LoaderConfig
    baseline_samples_per_s: float
    confidence: float | None
    tuning_seconds: float
    search: SearchResult
    profile: Profile
    space: SearchSpace
    batched: FetcherCheck | None = None

    @property
    def speedup(self) -> float | None:
        return self.search.speedup

    @property
    def trials(self) -> list[Trial]:
        return self.search.trials

    def to_dict(self) -> dict[str, Any]:
        search = self.search.to_dict()
        section = {
            "baseline": {
                "config": self.baseline.to_dict(),
                "label": self.baseline.label(),
                "samples_per_s": round(self.baseline_samples_per_s, 2),
            },
            "best": {
                "config": self.config.to_dict(),
                "label": self.config.label(),
                "samples_per_s": round(self.samples_per_s, 2),
                "speedup": search["speedup"],
                "rounds": search["rounds"],
                "confidence": search["confidence"],
                "confirmed": search["confirmed"],
                "head_to_head": search["head_to_head"],
                "skipped": search["skipped"],
                "keep_baseline": search["keep_baseline"],
                "within_pct": search["within_pct"],
                "runner_up": search["runner_up"],
                "margin": search["margin"],
                "margin_interval": search["margin_interval"],
                "gain_interval": search["gain_interval"],
                "tie": search["tie"],
                "tie_margin": search["tie_margin"],
            },
            "trials": search["trials"],
            "tuning_seconds": round(self.tuning_seconds, 3),
            "search": {
                "region": search["region"],
                "finalists": search["finalists"],
                "rounds": search["rounds"],
                "noise": search["noise"],
                "startup_s": search["startup_s"],
                "notes": search["notes"],
                "effects": search["effects"],
                "memory": search["memory"],
                "plan": search["plan"],
                "persistent_workers": search["persistent_workers"],
                "noisy_tie": search["noisy_tie"],
                "epochs": search["epochs"],
                "space": self.space.to_dict(),
                "profile": self.profile.to_dict(),
                "batched_fetch": None if self.batched is None else self.batched.to_dict(),
            },
            "memory_budget": search["pick_memory"],
        }
        return section


# -- ss.tune ---------------------------------------------------------------------------------------


def tune(
    target: Any,
    *,
    budget_s: float = DEFAULT_BUDGET_S,
    tune_batch_size: bool = False,
    max_workers: int | None = None,
    memory_budget_mb: float | None = None,
    repeats: int | None = None,
    batch_size: int | None = None,
    collate: Any = None,
    seed: int = 0,
    on_trial: Callable[[Trial], None] | None = None,
    compare_start_methods: bool = False,
    seeds: Sequence[tuple[LoaderConfig, str]] = (),
    on_plan: Callable[[dict[str, Any]], None] | None = None,
) -> TuneResult:
    """Find the fastest loader config for ``target`` within ``budget_s`` seconds.

    ``target``: a TARGET spec, a zero-argument callable, a Dataset, DataLoader,
    dict or :class:`~stallscope.target.Pipeline`. The baseline is the user's
    DataLoader config when the target returns one, else torch's defaults.
    ``repeats`` fixes the number of interleaved confirmation rounds (default:
    adaptive, until the pick is clear). ``compare_start_methods`` also times
    worker start-up under ``forkserver``; leave it off when the calling script
    has no ``if __name__ == "__main__":`` guard (forkserver and spawn re-run
    the main script in their workers). The CLI's ``--start-methods`` turns it on.
    ``seeds``: (config, role) pairs that race in the final round whatever the
    scan says (``doctor`` passes the sweep's best as "sweep-best").
    ``on_plan`` hears the budget plan (what the budget fits) before the search.
    See NOTE [tuning strategy] in search.py.
    """
    started = time.perf_counter()
    if budget_s <= 0:
        raise UsageError(f"--budget must be positive, not {budget_s:g}.")
    if max_workers is not None and max_workers < 0:
        raise UsageError(f"--max-workers must be at least 0, not {max_workers}.")
    if memory_budget_mb is not None and memory_budget_mb <= 0:
        raise UsageError(f"--memory-budget must be positive (MB), not {memory_budget_mb:g}.")
    if repeats is not None and repeats < 1:
        raise UsageError(f"--repeats must be at least 1, not {repeats}.")
    pipeline = (
        target
        if isinstance(target, Pipeline)
        else load_target(target, batch_size=batch_size, collate=collate)
    )
    if tune_batch_size and pipeline.batch_sampler is not None:
        raise UsageError(
            "the loader's batch_sampler decides its batch sizes, so --tune-batch-size has nothing "
            "to change; leave it out (the other knobs are tuned with your batches)."
        )
    preflight(pipeline)
    kind = pipeline.kind
    if not kind.tunable:
        raise UsageError(
            kind.limits.get("tune") or f"{kind.description} exposes no knob stallscope can set."
        )
    profile, check = (
        profile_pipeline(pipeline) if pipeline.has_dataset else (profile_loader(pipeline), None)
    )
    cores = usable_cores()
    space = build_space(
        pipeline,
        profile,
        cores=cores,
        max_workers=max_workers,
        tune_batch_size=tune_batch_size,
        compare_start_methods=compare_start_methods,
    )
    notes = []
    if pipeline.has_dataset:
        threads = thread_eligibility(pipeline, profile, budget_s=budget_s)
        space.worker_threads, space.thread_gate = threads.counts, threads
    if not kind.rebuilds_from_parts:
        notes.append(
            f"the loader is {kind.description}; trials change only what it exposes: "
            f"{', '.join(kind.knobs)}"
        )
    limit_space(space, kind)
    if kind.rebuilds_from_parts and pipeline.call is not None and pipeline.call.own_factory:
        notes.append(limit_to_factory(space, pipeline.call))
    if pipeline.is_iterable and space.max_workers > 0:
        why = replayed_stream(pipeline, seconds=min(20.0, 0.2 * budget_s))
        if why:  # every worker would replay the stream: more samples/s, all of them copies
            space.max_workers = 0
            notes.append(why)
    budget_bytes = (
        int(memory_budget_mb * MB)
        if memory_budget_mb
        else int(MEMORY_BUDGET_SHARE * psutil.virtual_memory().available)
    )
    memory = MemoryBudget(budget_bytes=budget_bytes, batch_bytes=profile.batch_bytes)
    baseline = pipeline.baseline.replace(batch_size=pipeline.batch_size)
    settings = SearchSettings(budget_s=budget_s, rounds=repeats, seed=seed)
    evaluator = LoaderEvaluator(
        pipeline, budget_s=budget_s, started=started, seed=seed, min_batches=settings.min_batches
    )
    search = Search(
        evaluator,
        space,
        profile,
        baseline=baseline,
        memory=memory,
        settings=settings,
        on_trial=on_trial,
        seeds=seeds,
    )
    with no_orphans():
        result = search.run(on_plan=on_plan)
    if (
        not result.samples_per_s > 0
    ):  # no pick at 0 samples/s: every trial failed or delivered nothing
        failed = next((t.error for t in result.trials if t.error), None)
        raise PipelineError(
            "no configuration tried delivered a batch"
            + (f" (the first failure: {failed})" if failed else "")
            + "."
        )
    result.notes[:0] = notes
    return TuneResult(
        config=result.pick,
        samples_per_s=result.samples_per_s,
        baseline=baseline,
        baseline_samples_per_s=result.baseline_samples_per_s,
        confidence=result.confidence,
        tuning_seconds=time.perf_counter() - started,
        search=result,
        profile=profile,
        space=space,
        batched=check,
    )
