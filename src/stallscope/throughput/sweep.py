"""``ss.bench``: throughput over a grid of loader settings (SPEC §3.1–3.3)."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import LoaderConfig
from ..errors import PipelineError, UsageError
from ..pipeline.preflight import Preflight, preflight
from ..runtime.host import cuda_available, usable_cores
from ..runtime.processes import safe_from_worker_deaths
from ..target import Pipeline, load_target
from .measure import (
    Measurement,
    histogram,
    is_baseline,
    latency_stats,
    measure,
    measure_interleaved,
    relative_spread,
    spread,
)

# A worker count within this fraction of the best rate counts as "on the plateau".
PLATEAU_FRACTION = 0.95


def default_worker_counts(
    cores: int | None = None, *, epoch_batches: int | None = None
) -> list[int]:
    """0, 1, 2, cores, 2×cores, 4×cores (cores = usable cores, see host.py), none above the batches
    in one epoch where the loader's epoch is known (``Pipeline.batches_per_epoch``).

    A loop over epochs hands each worker a batch at a time, and an epoch's indices run out with
    its last batch: workers beyond an epoch's batches only wait. The steady state does not see
    it (its sampler runs on across epochs), so a sweep past the epoch would show a rate no loop
    gets: on the demo's 7-batch epochs and 16 cores, 16 persistent workers measured 2,940
    images/s in the steady state and 1,019 over whole epochs, 7 workers 1,078
    (docs/methodology.md, "Workers beyond an epoch")."""
    cores = cores or usable_cores()
    return sorted({within_epoch(c, epoch_batches) for c in (0, 1, 2, cores, 2 * cores, 4 * cores)})


def within_epoch(workers: int, epoch_batches: int | None) -> int:
    """``workers``, at most the batches in one epoch where that is known (and at least one worker
    then: see :func:`default_worker_counts`)."""
    return workers if epoch_batches is None else min(workers, max(1, epoch_batches))


@dataclass
class ConfigResult:
    """A configuration's repeats, summarised."""

    config: LoaderConfig
    measurements: list[Measurement]
    efficiency: float | None = None
    speedup: float | None = None
    # Set when the workers replay an unsharded IterableDataset: the rate counts copies.
    duplicates: dict[str, Any] | None = None
    label: str | None = None  # the loader kind's label (its own knobs only), else the config's
    # Set when the pipeline failed at this config (one sentence: why); its measurements are dropped.
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.measurements)

    @property
    def rates(self) -> list[float]:
        return [m.samples_per_s for m in self.measurements]

    @property
    def median_rate(self) -> float:
        return spread(self.rates)["median"]

    def all_batch_ms(self) -> list[float]:
        return [ms for m in self.measurements for ms in m.batch_ms]

    def to_dict(self) -> dict[str, Any]:
        if self.error is not None:
            # A failed config: what it was and why, no figures (the schema's failed benchResult).
            return {
                "config": self.config.to_dict(),
                "label": self.label or self.config.label(),
                "error": self.error,
            }
        resources = [m.resources for m in self.measurements if m.resources is not None]
        batch_ms = self.all_batch_ms()
        return {
            "config": self.config.to_dict(),
            "label": self.label or self.config.label(),
            "samples_per_s": spread(self.rates),
            "batches_per_s": spread([m.batches_per_s for m in self.measurements]),
            "tokens_per_s": _tokens_per_s(self.measurements),
            "startup_s": spread([m.startup_s for m in self.measurements])["median"],
            "batch_ms": latency_stats(batch_ms),
            "batch_ms_histogram": histogram(batch_ms),
            "efficiency": self.efficiency,
            "speedup": self.speedup,
            "noise": relative_spread(self.rates),
            "repeats": len(self.measurements),
            "samples_per_s_repeats": self.rates,
            "window_s": sum(m.window_s for m in self.measurements),
            "batches_measured": sum(m.batches for m in self.measurements),
            "samples_measured": sum(m.samples for m in self.measurements),
            "resources": _merge_resources(resources),
            "duplicates": self.duplicates,
            # Epochs too short for a steady state: the rate includes their start-up (NOTE [epoch
            # restarts] in measure.py).
            "startup_included": any(m.startup_included for m in self.measurements),
            # The loader's epoch and what starting one cost, where the windows saw them (NOTE
            # [per-epoch rate] in tuning/epoch_cost.py): the analysis weighs them.
            "epoch_samples": _median_known([m.epoch_samples for m in self.measurements], 0),
            "restart_s": _median_known([m.restart_s for m in self.measurements], 4),
            "error": None,
            "main_ms_per_batch": main_ms_per_batch(self.measurements),
            "cpu_ms_per_sample": loader_cpu_ms_per_sample(self.measurements),
        }


def _median_known(values: Sequence[float | None], digits: int) -> Any:
    """The median of the values measured (None where none was), rounded to ``digits`` (0: an
    int)."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    middle = statistics.median(known)
    return round(middle) if digits == 0 else round(middle, digits)


def main_ms_per_batch(measurements: Sequence[Measurement]) -> float | None:
    """Median over repeats of the main process's CPU ms per batch received from workers
    (NOTE [receive cost] in measure.py); None at 0 workers, where the main process does
    everything."""
    per_batch = [
        1000.0 * m.main_cpu_s / m.batches
        for m in measurements
        if m.config.num_workers > 0 and m.main_cpu_s is not None and m.batches > 0
    ]
    return round(spread(per_batch)["median"], 4) if per_batch else None


def loader_cpu_ms_per_sample(measurements: Sequence[Measurement]) -> float | None:
    """Median over repeats of the CPU ms the whole loader (main process and workers) spent per
    sample."""
    per_sample = [
        1000.0 * m.loader_cpu_s / m.samples
        for m in measurements
        if m.loader_cpu_s is not None and m.samples > 0
    ]
    return round(spread(per_sample)["median"], 4) if per_sample else None


def _tokens_per_s(measurements: list[Any]) -> dict[str, float] | None:
    """The spread of tokens/s where the batches hold token ids (every repeat counted them)."""
    rates = [m.tokens_per_s for m in measurements]
    return spread(rates) if rates and all(r is not None for r in rates) else None


def _merge_resources(summaries: list[Any]) -> dict[str, Any] | None:
    if not summaries:
        return None
    dicts = [s.to_dict() for s in summaries]
    merged: dict[str, Any] = {}
    for key in ("main_cpu_percent", "workers_cpu_percent"):
        merged[key] = round(sum(d[key] for d in dicts) / len(dicts), 1)
    for key in ("main_rss_mb", "workers_rss_mb", "n_workers"):
        merged[key] = max(d[key] for d in dicts)
    uss = [d["worker_uss_mb"] for d in dicts if d["worker_uss_mb"] is not None]
    merged["worker_uss_mb"] = max(uss) if uss else None
    return merged


@dataclass
class BenchResult:
    target: str
    cores: int
    results: list[ConfigResult]
    single_process_ms_per_sample: float | None
    dataset: dict[str, Any] = field(default_factory=dict)

    @property
    def measured(self) -> list[ConfigResult]:
        """The configs that measured a rate (failed ones left out)."""
        return [r for r in self.results if r.ok]

    @property
    def best(self) -> ConfigResult:
        """The fastest config; rows whose rate counts duplicated samples never win, nor do
        failed ones."""
        measured = self.measured
        honest = [r for r in measured if r.duplicates is None] or measured
        return max(honest, key=lambda r: r.median_rate)

    def plateau_workers(self) -> int | None:
        """Fewest workers reaching PLATEAU_FRACTION of the best rate (same other knobs as the
        best)."""
        best = self.best
        same = [
            r
            for r in self.measured
            if r.config.replace(
                num_workers=best.config.num_workers, prefetch_factor=best.config.prefetch_factor
            )
            == best.config
            or r.config.num_workers == 0
        ]
        ok = [
            r.config.num_workers
            for r in same
            if r.median_rate >= PLATEAU_FRACTION * best.median_rate and r.duplicates is None
        ]
        return min(ok) if ok else None

    def to_dict(self) -> dict[str, Any]:
        if not self.measured:
            return {"results": [r.to_dict() for r in self.results], "dataset": self.dataset}
        best = self.best
        per_sample = self.single_process_ms_per_sample
        ideal = {}
        if per_sample:
            for w in sorted({r.config.num_workers for r in self.measured}):
                ideal[str(w)] = min(self.cores, max(w, 1)) * 1000.0 / per_sample
        return {
            "results": [r.to_dict() for r in self.results],
            "scaling": {
                "cores": self.cores,
                "single_process_ms_per_sample": per_sample,
                "best_label": best.config.label(),
                "best_index": self.results.index(best),
                "plateau_workers": self.plateau_workers(),
                "ideal_samples_per_s": ideal,
            },
            "dataset": self.dataset,
        }


def dataset_facts(pipeline: Pipeline, pre: Preflight) -> dict[str, Any]:
    call = pipeline.call
    return {
        "length": pre.length,
        "item": pre.item_structure,
        "batch": pre.batch_structure,
        "batch_bytes": pre.batch_bytes,
        # None where the loader batches itself: its batches' size is what the sweep measures.
        "batch_size": None if pipeline.baseline.batches_itself else pipeline.batch_size,
        # "batch_sampler": the user's batch sampler decides each batch (batch_size is then their
        # mean); "loader": the loader builds its batches itself.
        "batching": "loader"
        if pipeline.baseline.batches_itself
        else (call.batching if call is not None else "batch_size"),
        "batch_sizes": call.batch_sizes if call is not None else None,
        "iterable": pipeline.is_iterable,
        "type": type(pipeline.dataset).__name__ if pipeline.has_dataset else None,
        "kind": pipeline.kind.to_dict(),
    }


def grid(
    base: LoaderConfig,
    axes: Mapping[str, Sequence[Any]],
    *,
    multiprocessing_context: str | None = None,
) -> list[LoaderConfig]:
    """The cartesian product of ``axes`` (a LoaderConfig field -> the values to try, the first
    changing slowest) over ``base``, deduplicated (knobs that need workers collapse at 0 workers,
    as LoaderConfig drops them there).
    """
    configs: list[LoaderConfig] = []
    for values in itertools.product(*axes.values()):
        knobs = dict(zip(axes, values))
        if "pin_memory" in knobs:  # pinning needs CUDA
            knobs["pin_memory"] = knobs["pin_memory"] and cuda_available()
        cfg = base.replace(  # other knobs (a loader kind's own) stay the baseline's
            **knobs,
            multiprocessing_context=multiprocessing_context or base.multiprocessing_context,
            batched_fetch=False,
            torch_threads=None,
        )
        if cfg not in configs:
            configs.append(cfg)
    return configs


@safe_from_worker_deaths
def bench(
    target: Any,
    *,
    num_workers: Sequence[int] | None = None,
    batch_sizes: Sequence[int] | None = None,
    prefetch_factors: Sequence[int] | None = None,
    persistent_workers: Sequence[bool] | None = None,
    pin_memory: Sequence[bool] | None = None,
    in_order: Sequence[bool] | None = None,
    multiprocessing_context: str | None = None,
    worker_threads: Sequence[int] | None = None,
    repeats: int = 3,
    min_window_s: float = 1.0,
    timeout: float = 60.0,
    sample_resources: bool = True,
    on_result: Callable[[int, int, Measurement], None] | None = None,
    configs: Sequence[LoaderConfig] | None = None,
) -> BenchResult:
    """Measure throughput over a grid; see ``stallscope bench --help`` for the knobs.

    ``target`` is a TARGET string, a callable, a Dataset/DataLoader/dict or a
    loaded :class:`Pipeline`. Every config is measured ``repeats`` times,
    interleaved. Efficiency compares each rate with ``min(cores, workers)``
    times the single-process rate at the same batch size.
    """
    pipeline = target if isinstance(target, Pipeline) else load_target(target)
    if pipeline.batch_sampler is not None and set(batch_sizes or []) - {pipeline.batch_size}:
        raise UsageError(
            "the loader's batch_sampler decides its batch sizes, so a batch-size grid "
            "cannot change them; "
            "leave --batch-sizes out (or build the loader with batch_size=)."
        )
    pre = preflight(pipeline)
    cores = usable_cores()
    if configs is None:
        base = pipeline.baseline
        axes = {  # a knob left out sweeps only the baseline's value
            "batch_size": batch_sizes or [base.batch_size],
            "num_workers": num_workers
            or default_worker_counts(cores, epoch_batches=pipeline.batches_per_epoch()),
            # at every worker count, 0 included (threads in the main process)
            "worker_threads": worker_threads or [base.worker_threads],
            "prefetch_factor": prefetch_factors or [base.prefetch_factor or 2],
            "persistent_workers": persistent_workers or [base.persistent_workers],
            "pin_memory": pin_memory or [base.pin_memory],
            "in_order": in_order or [base.in_order],
        }
        configs = grid(base, axes, multiprocessing_context=multiprocessing_context)
    configs = [c for c in configs if _settable(pipeline, c)]
    replay = None
    if pipeline.is_iterable and any(c.num_workers > 0 for c in configs):
        replay = replayed_workers(pipeline, multiprocessing_context)
    done: list[list[Measurement]] = [[] for _ in configs]
    # A config that fails inside the pipeline (the dataset raises only in workers, or only at one
    # prefetch setting; a worker dies) is a failed row; the others go on (NOTE [failed configs]).
    failures: dict[int, PipelineError] = {}

    def record_result(index: int, repeat: int, m: Measurement) -> None:
        done[index].append(m)
        if on_result is not None:
            on_result(index, repeat, m)

    try:
        measure_interleaved(
            pipeline,
            configs,
            repeats=repeats,
            on_result=record_result,
            failures=failures,
            min_window_s=min_window_s,
            timeout=timeout,
            sample_resources=sample_resources,
        )
    except KeyboardInterrupt as interrupt:
        # Ctrl-C: hand what was measured so far to the caller for a partial report.
        # The summary rides on the exception itself, as an attribute KeyboardInterrupt lacks.
        interrupt.partial = _summarise(  # type: ignore[attr-defined]
            pipeline, pre, configs, done, cores, references=None, replay=replay, failures=failures
        )
        raise
    _raise_unless_measured(pipeline, configs, failures)
    return _summarise(
        pipeline,
        pre,
        configs,
        done,
        cores,
        references=(min_window_s, timeout),
        replay=replay,
        failures=failures,
    )


def _raise_unless_measured(
    pipeline: Pipeline, configs: Sequence[LoaderConfig], failures: dict[int, PipelineError]
) -> None:
    """The sweep's error when it cannot stand for the pipeline: the user's own config failed, or
    every config did.

    NOTE [failed configs]
    A config can fail where the user's does not: a dataset that raises only in worker processes,
    or only with one prefetch setting, a worker killed at one worker count. That is a finding
    about that config, not about the pipeline: its row says "failed" and why, and the sweep goes
    on. Only when the user's own config fails (or nothing could be measured) is the pipeline
    itself broken, and that is the command's error (exit 2).
    """
    if not failures:
        return
    for index, error in failures.items():
        if is_baseline(pipeline, configs[index]):
            raise error
    if len(failures) == len(configs):
        raise failures[min(failures)]


def _settable(pipeline: Pipeline, config: LoaderConfig) -> bool:
    """Whether every knob ``config`` changes from the baseline is one this loader kind can set
    (NOTE [loader kinds]); the baseline itself always is."""
    if pipeline.kind.rebuilds_from_parts:
        return True
    base, wanted = pipeline.baseline.to_dict(), config.to_dict()
    changed = {k for k in wanted if wanted[k] != base.get(k)}
    # Knobs that follow num_workers (normalised at 0 workers) change with it.
    if "num_workers" in pipeline.kind.knobs:
        changed -= {
            "prefetch_factor",
            "in_order",
            "persistent_workers",
            "multiprocessing_context",
        } - set(
            k
            for k in ("prefetch_factor", "in_order")
            if base.get("num_workers") and wanted.get("num_workers")
        )
    return changed <= set(pipeline.kind.knobs)


def replayed_workers(pipeline: Pipeline, start_method: str | None) -> dict[str, Any] | None:
    """The iterable-duplicates probe's verdict when the stream's workers duplicate samples, else
    None (NOTE [unsharded streams] in ``checks/sharding.py``)."""
    from ..checks.sharding import stream_duplicates

    seen = stream_duplicates(pipeline, start_method=start_method, seconds=10.0)
    if not seen["duplicated"]:
        return None
    return {
        "duplicate_fraction": seen["duplicate_fraction"],
        "samples_compared": seen["samples_compared"],
        "probe_workers": seen["workers"],
        "note": (
            "the IterableDataset is not sharded by worker: every worker replays the "
            "stream, so this "
            "rate counts each sample once per worker and is not a speed-up"
        ),
    }


def _summarise(
    pipeline: Pipeline,
    pre: Preflight,
    configs: list[LoaderConfig],
    runs: list[list[Measurement]],
    cores: int,
    *,
    references: tuple[float, float] | None,
    replay: dict[str, Any] | None = None,
    failures: dict[int, PipelineError] | None = None,
) -> BenchResult:
    """A BenchResult from the configs measured at least once or failed; ``references`` (window,
    timeout) allows measuring a missing single-process reference; ``replay`` marks the
    rows with workers on a stream they duplicate; ``failures`` the configs that failed, by
    index (NOTE [failed configs])."""
    failed = failures or {}
    results = [
        ConfigResult(
            config=c,
            measurements=[] if i in failed else m,
            duplicates=replay if c.num_workers > 0 and i not in failed else None,
            label=pipeline.kind.label(c),
            error=str(failed[i]) if i in failed else None,
        )
        for i, (c, m) in enumerate(zip(configs, runs))
        if m or i in failed
    ]
    per_sample = None
    # Without a num_workers knob no single-process configuration of this loader exists: a speed-up
    # or efficiency against one would be made up (an iterable measured as it is may run threads).
    if "num_workers" in pipeline.kind.knobs:
        if references is not None:
            single = _single_process_references(
                pipeline, results, min_window_s=references[0], timeout=references[1]
            )
        else:
            single = _single_process_rates(results)
        per_sample = _attach_scaling(results, cores, single)
    return BenchResult(
        target=pipeline.target,
        cores=cores,
        results=results,
        single_process_ms_per_sample=per_sample,
        dataset={**dataset_facts(pipeline, pre), "workers_duplicate_samples": replay},
    )


def _single_process_rates(results: list[ConfigResult]) -> dict[int, float]:
    """Median rate of the 0-worker configs the grid measured, per batch size."""
    return {
        r.config.batch_size: r.median_rate
        for r in results
        if r.ok and r.config.num_workers == 0 and r.median_rate > 0
    }


def _single_process_references(
    pipeline: Pipeline, results: list[ConfigResult], *, min_window_s: float, timeout: float
) -> dict[int, float]:
    """Single-process rate per batch size; measured once more where the grid has no 0-worker
    config."""
    single = _single_process_rates(results)
    for bs in sorted({r.config.batch_size for r in results if r.ok} - set(single)):
        try:
            m = measure(
                pipeline,
                LoaderConfig(num_workers=0, batch_size=bs),
                min_window_s=min_window_s,
                timeout=timeout,
            )
        except PipelineError:
            continue  # no reference at this batch size: its rows get no speed-up
        if m.samples_per_s > 0:
            single[bs] = m.samples_per_s
    return single


def _attach_scaling(
    results: list[ConfigResult], cores: int, single: dict[int, float]
) -> float | None:
    """Set speed-up and parallel efficiency against the single-process rate per batch size."""
    for r in results:
        base = single.get(r.config.batch_size)
        if not base or r.duplicates is not None or not r.ok:
            continue  # a rate of duplicated samples is no speed-up
        r.speedup = r.median_rate / base
        ideal = min(cores, max(r.config.num_workers, 1)) * base
        r.efficiency = r.median_rate / ideal
    if not single:
        return None
    # The single-process per-sample cost at the most common batch size.
    bs = max(single, key=lambda b: sum(1 for r in results if r.ok and r.config.batch_size == b))
    return 1000.0 / single[bs]
