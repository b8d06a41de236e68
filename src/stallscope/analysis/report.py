"""Report analysis: pure functions from a run record (dict) to the facts a report states.

Renderers never compute: they ask :func:`analyse` for a :class:`ReportFacts`
and turn each fact into sentences, tables and plots. Every function here reads
only the record (schema §5, see ``stallscope/schema/record-v1.json``); a section whose data is
absent yields ``None`` or an empty list, and the report omits it.

Rules are small and named and kept in lists, the way pyinstrument keeps its
default processors: :data:`VERDICT_RULES` (first match wins),
:data:`CHECKLIST_RULES` (one row each), :data:`RECOMMENDATION_RULES` (derived
advice, skipped where the record already carries the same advice) and
:data:`FINDING_RULES` (per finding code, numbers that help troubleshoot).
A caller can pass its own lists.

The only numbers not taken from the record are the named :data:`TARGETS` the
checklist compares against.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

LATENCY_BOUND_MARGIN = 1.1  # speed-up must beat the core count by this factor, beyond noise

Record = dict  # a RunRecord.to_dict()

MIB = 1024 * 1024  # resources.py reports memory in MiB ("MB" there)

# Targets of the checklist: (pass boundary, fail boundary). Between the two a
# check warns. Sources: the 30% data-wait bar of issue 6; half the available
# RAM is the tuner's default memory budget (SPEC §7, like tf.data's ram_budget).
TARGETS: dict[str, tuple[float, float]] = {
    "data_wait_fraction": (0.30, 0.50),
    "gpu_util_percent": (80.0, 50.0),
    "augmentation_percent": (30.0, 60.0),
    "batch_time_ratio": (1.5, 3.0),
    "parallel_efficiency": (0.70, 0.40),
    "measurement_noise": (0.05, 0.15),
    "tuning_headroom": (1.10, 2.0),
    "shm_fraction": (0.50, 1.0),
    "ram_fraction": (0.50, 0.80),
    "startup_fraction": (0.05, 0.20),
    "error_findings": (0, 0),
}


# -- small readers -------------------------------------------------------------
def as_record_dict(record: Any) -> Record:
    """A RunRecord or its dict, as a dict."""
    if isinstance(record, dict):
        return record
    to_dict = getattr(record, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    raise TypeError(f"expected a RunRecord or a record dict, got {type(record).__name__}")


def number(value: Any) -> float | None:
    """A finite int/float as float; anything else (None, bool, str, NaN) as None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def rate_of(value: Any) -> float | None:
    """samples/s given either as a number or as a {median, min, max} spread."""
    if isinstance(value, dict):
        return number(value.get("median"))
    return number(value)


def config_label(config: Any, label: Any = None) -> str:
    """The record's label, else LoaderConfig.label() of the config dict."""
    if isinstance(label, str) and label:
        return label
    if not isinstance(config, dict):
        return "unknown configuration"
    from ..config import LoaderConfig

    try:
        return LoaderConfig.from_dict(config).label()
    except (TypeError, ValueError):
        return " ".join(f"{k}={v}" for k, v in config.items() if v is not None)


def ok_results(r: Record) -> list[dict]:
    """Bench results that measured a rate (no error)."""
    return [
        res
        for res in r.get("results") or []
        if isinstance(res, dict) and not res.get("error") and rate_of(res.get("samples_per_s")) is not None
    ]


def best_result(r: Record) -> dict | None:
    """The bench result the sweep called best (scaling.best_index), else the fastest."""
    results = r.get("results") or []
    index = (r.get("scaling") or {}).get("best_index")
    if isinstance(index, int) and 0 <= index < len(results):
        chosen = results[index]
        if isinstance(chosen, dict) and not chosen.get("error") and rate_of(chosen.get("samples_per_s")) is not None:
            return chosen
    ok = ok_results(r)
    return max(ok, key=lambda res: rate_of(res["samples_per_s"]) or 0.0) if ok else None


def result_for_config(r: Record, config: Any) -> dict | None:
    """The bench result measured with exactly this config, if any."""
    if not isinstance(config, dict):
        return None
    for res in ok_results(r):
        if _same_config(res.get("config"), config):
            return res
    return None


def _same_config(a: Any, b: Any) -> bool:
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    keys = set(a) | set(b)
    return all(a.get(k) == b.get(k) for k in keys)


def _workers(config: Any) -> int:
    value = config.get("num_workers") if isinstance(config, dict) else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def _batch_size(config: Any) -> int | None:
    value = config.get("batch_size") if isinstance(config, dict) else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _prefetch(config: Any) -> int:
    value = config.get("prefetch_factor") if isinstance(config, dict) else None
    # DataLoader's default prefetch_factor with workers is 2.
    return int(value) if isinstance(value, int) and value > 0 else 2


def single_process_result(r: Record, batch_size: int | None = None) -> dict | None:
    """The num_workers=0 result, preferring the given batch size."""
    zero = [res for res in ok_results(r) if _workers(res.get("config")) == 0]
    for res in zero:
        if batch_size is None or _batch_size(res.get("config")) == batch_size:
            return res
    return zero[0] if zero else None


# -- facts ---------------------------------------------------------------------
@dataclass
class ConfigRate:
    label: str
    config: dict
    samples_per_s: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BenchRow:
    label: str
    config: dict
    samples_per_s: float | None
    min_samples_per_s: float | None
    max_samples_per_s: float | None
    startup_s: float | None
    p50_ms: float | None
    p95_ms: float | None
    efficiency: float | None
    speedup: float | None
    noise: float | None
    repeats: int | None
    error: str | None
    is_best: bool = False


@dataclass
class BenchFacts:
    rows: list[BenchRow]
    measured: int
    failed: int
    cores: int | None
    single_process_ms_per_sample: float | None
    best: BenchRow | None
    plateau_workers: int | None
    repeats: int | None  # when every configuration had the same number of repeats
    worker_counts: list[int]
    latency_bound: bool  # the best beats what the cores could do: more speed-up than cores, via more workers
    batches_timed: int | None = None  # steady-state batches timed, all configurations and repeats
    window_s: float | None = None  # steady-state seconds those batches took


@dataclass
class TrialRow:
    label: str
    phase: str | None
    samples_per_s: float
    vs_baseline: float | None


@dataclass
class TuningFacts:
    baseline: ConfigRate | None
    best: ConfigRate
    speedup: float | None
    confidence: Any
    seconds: float | None
    trials: int
    top_trials: list[TrialRow]
    failed_trials: list[tuple[str, str]] = field(default_factory=list)  # (label, error)
    runner_up: str | None = None
    margin: float | None = None  # best / runner-up
    region: str | None = None  # how the tuner classified the source (e.g. latency-bound)
    region_reason: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class BestConfig:
    source: str  # "tune" or "bench"
    label: str
    config: dict
    samples_per_s: float
    speedup: float | None  # vs the baseline below
    baseline: ConfigRate | None
    result: dict | None  # the bench result with this config, when measured there


@dataclass
class StageRow:
    name: str
    kind: str | None
    ms_per_sample: float
    share: float  # fraction of the summed stage time


@dataclass
class AugmentationFacts:
    ms_per_sample: float | None
    percent: float | None
    transforms: list[str]
    with_ms: float | None = None  # per-sample time with and without the random transforms
    without_ms: float | None = None


@dataclass
class Hotspot:
    function: str
    location: str
    calls: int | None
    total_ms: float | None
    cumulative_ms: float | None


@dataclass
class StageFacts:
    rows: list[StageRow]
    total_ms: float
    top: StageRow | None
    augmentation: AugmentationFacts | None
    hotspots: list[Hotspot]
    run: dict = field(default_factory=dict)  # how the stages were measured (stage_run)
    notes: list[str] = field(default_factory=list)


@dataclass
class TrainingFacts:
    verdict: str | None
    stall_fraction: float | None
    steps: int | None
    gpu_util: float | None
    what_if_speedup: float | None
    first_batch_s: float | None
    mean_data_ms: float | None  # steady state (the record's data_ms.mean), else over the timeline
    mean_compute_ms: float | None
    occupancy: Any
    ranks: list[dict]
    advice: list[str]
    resources: dict | None
    config_label: str | None = None  # the loader the loop ran with
    epoch_steps: int | None = None
    first_batch_share: float | None = None  # of one epoch (startup_share_per_epoch)
    distributed: dict | None = None
    input_bound_at: float | None = None  # the profiler's own threshold, when recorded


@dataclass
class EpochRow:
    role: str  # "best" or "baseline"
    label: str
    samples_per_s: float
    seconds: float
    batches: int | None
    startup_s: float | None
    persistent: bool


@dataclass
class EpochEstimate:
    length: int
    rows: list[EpochRow]
    saving_s: float | None  # baseline minus best


@dataclass
class MemoryRow:
    role: str  # "best" or "largest"
    label: str
    workers: int
    prefetch_factor: int
    batch_size: int | None
    batch_bytes: float
    in_flight_batches: int
    in_flight_bytes: float
    shm_fraction: float | None
    workers_rss_bytes: float | None
    ram_needed_bytes: float
    ram_fraction: float | None


@dataclass
class MemoryBudget:
    rows: list[MemoryRow]
    shm_free_bytes: float | None
    ram_available_bytes: float | None
    reference_batch_size: int | None
    reference_batch_bytes: float


@dataclass
class CpuRow:
    label: str
    workers: int
    main_percent: float
    workers_percent: float
    total_percent: float
    capacity_fraction: float | None  # of the usable cores
    main_rss_mb: float | None
    workers_rss_mb: float | None
    worker_uss_mb: float | None


@dataclass
class CpuUse:
    cores: int | None
    rows: list[CpuRow]
    focus: CpuRow  # the best configuration's row (or the training loop's)


@dataclass
class Target:
    key: str
    higher_is_better: bool
    good: float
    bad: float

    def status(self, value: float) -> str:
        if self.higher_is_better:
            return "pass" if value >= self.good else "warn" if value >= self.bad else "fail"
        return "pass" if value <= self.good else "warn" if value <= self.bad else "fail"


def target(key: str, *, higher_is_better: bool = False) -> Target:
    good, bad = TARGETS[key]
    return Target(key, higher_is_better, good, bad)


@dataclass
class CheckRow:
    name: str
    measured: float
    unit: str  # "fraction", "percent", "ratio", "count"
    target: Target
    subject: str | None = None  # the configuration measured, when it matters

    @property
    def status(self) -> str:
        return self.target.status(self.measured)


@dataclass
class FindingView:
    code: str
    severity: str
    message: str
    evidence: dict
    fix: str | None
    derived: dict[str, float] = field(default_factory=dict)


@dataclass
class FindingFacts:
    findings: list[FindingView]
    counts: dict[str, int]  # by severity


@dataclass
class Recommendation:
    id: str
    source: str  # "record" or "analysis"
    title: Any = None
    detail: Any = None
    measured: Any = None
    expected_gain: Any = None
    values: dict[str, Any] = field(default_factory=dict)  # for derived advice


@dataclass
class Verdict:
    label: str
    values: dict[str, Any]


@dataclass
class ReportFacts:
    command: str
    target: str
    verdict: Verdict | None
    bench: BenchFacts | None
    tuning: TuningFacts | None
    best: BestConfig | None
    stages: StageFacts | None
    training: TrainingFacts | None
    epoch: EpochEstimate | None
    memory: MemoryBudget | None
    cpu: CpuUse | None
    checklist: list[CheckRow]
    findings: FindingFacts | None
    recommendations: list[Recommendation]


# -- sections ------------------------------------------------------------------
def bench_facts(r: Record) -> BenchFacts | None:
    results = [res for res in r.get("results") or [] if isinstance(res, dict)]
    if not results:
        return None
    best = best_result(r)
    rows = []
    for res in results:
        spread = res.get("samples_per_s") if isinstance(res.get("samples_per_s"), dict) else {}
        latency = res.get("batch_ms") or {}
        rows.append(
            BenchRow(
                label=config_label(res.get("config"), res.get("label")),
                config=res.get("config") or {},
                samples_per_s=rate_of(res.get("samples_per_s")),
                min_samples_per_s=number(spread.get("min")),
                max_samples_per_s=number(spread.get("max")),
                startup_s=number(res.get("startup_s")),
                p50_ms=number(latency.get("p50")),
                p95_ms=number(latency.get("p95")),
                efficiency=number(res.get("efficiency")),
                speedup=number(res.get("speedup")),
                noise=number(res.get("noise")),
                repeats=res.get("repeats") if isinstance(res.get("repeats"), int) else None,
                error=str(res["error"]) if res.get("error") else None,
                is_best=res is best,
            )
        )
    scaling = r.get("scaling") or {}
    measured = [row for row in rows if row.error is None and row.samples_per_s is not None]
    repeats = {row.repeats for row in measured}
    best_row = next((row for row in rows if row.is_best), None)
    cores = scaling.get("cores") or (r.get("host") or {}).get("cores")
    cores = cores if isinstance(cores, int) else None
    plateau = scaling.get("plateau_workers")
    ok = ok_results(r)
    timed = [res.get("batches_measured") for res in ok if isinstance(res.get("batches_measured"), int)]
    windows = [number(res.get("window_s")) for res in ok if number(res.get("window_s")) is not None]
    return BenchFacts(
        batches_timed=sum(timed) if timed else None,
        window_s=sum(windows) if windows else None,
        rows=rows,
        measured=len(measured),
        failed=len(rows) - len(measured),
        cores=cores,
        single_process_ms_per_sample=number(scaling.get("single_process_ms_per_sample")),
        best=best_row,
        plateau_workers=plateau if isinstance(plateau, int) else None,
        repeats=repeats.pop() if len(repeats) == 1 else None,
        worker_counts=sorted({_workers(row.config) for row in measured}),
        # More workers than cores is no evidence by itself (a noisy tie can land there);
        # a speed-up over one process beyond the core count is: the workers overlap waits.
        latency_bound=bool(
            best_row
            and cores
            and _workers(best_row.config) > cores
            and best_row.speedup is not None
            and best_row.speedup > cores * LATENCY_BOUND_MARGIN
        ),
    )


def tuning_facts(r: Record, *, top: int = 10) -> TuningFacts | None:
    best = r.get("best")
    if not isinstance(best, dict) or rate_of(best.get("samples_per_s")) is None:
        return None
    best_rate = ConfigRate(config_label(best.get("config")), best.get("config") or {}, rate_of(best["samples_per_s"]))
    baseline = _config_rate(r.get("baseline"))
    speedup = number(best.get("speedup"))
    if speedup is None and baseline and baseline.samples_per_s > 0:
        speedup = best_rate.samples_per_s / baseline.samples_per_s
    trials = [t for t in r.get("trials") or [] if isinstance(t, dict)]
    measured = [t for t in trials if not t.get("error") and (rate_of(t.get("samples_per_s")) or 0.0) > 0]
    ranked = sorted(measured, key=lambda t: rate_of(t["samples_per_s"]), reverse=True)[:top]
    rows = []
    for t in ranked:
        rate = rate_of(t["samples_per_s"])
        vs = rate / baseline.samples_per_s if baseline and baseline.samples_per_s > 0 else None
        rows.append(TrialRow(config_label(t.get("config"), t.get("label")), t.get("phase"), rate, vs))
    failed = [(config_label(t.get("config"), t.get("label")), str(t["error"])) for t in trials if t.get("error")]
    search = r.get("search") if isinstance(r.get("search"), dict) else {}
    region = search.get("region") if isinstance(search.get("region"), dict) else {}
    runner_up = best.get("runner_up")
    return TuningFacts(
        baseline=baseline,
        best=best_rate,
        speedup=speedup,
        confidence=best.get("confidence"),
        seconds=number(r.get("tuning_seconds")),
        trials=len(trials),
        top_trials=rows,
        failed_trials=failed,
        runner_up=runner_up if isinstance(runner_up, str) and runner_up else None,
        margin=number(best.get("margin")),
        region=region.get("name") if isinstance(region.get("name"), str) else None,
        region_reason=region.get("reason") if isinstance(region.get("reason"), str) else None,
        notes=[str(n) for n in search.get("notes") or [] if n],
    )


def _config_rate(entry: Any) -> ConfigRate | None:
    if not isinstance(entry, dict) or rate_of(entry.get("samples_per_s")) is None:
        return None
    return ConfigRate(
        config_label(entry.get("config"), entry.get("label")), entry.get("config") or {}, rate_of(entry["samples_per_s"])
    )


def best_configuration(r: Record) -> BestConfig | None:
    """The configuration the report recommends: the tuner's pick, else the sweep's best."""
    tuning = tuning_facts(r)
    if tuning is not None:
        return BestConfig(
            source="tune",
            label=tuning.best.label,
            config=tuning.best.config,
            samples_per_s=tuning.best.samples_per_s,
            speedup=tuning.speedup,
            baseline=tuning.baseline,
            result=result_for_config(r, tuning.best.config),
        )
    best = best_result(r)
    if best is None:
        return None
    single = single_process_result(r, _batch_size(best.get("config")))
    baseline = None
    if single is not None and single is not best:
        baseline = ConfigRate(
            config_label(single.get("config"), single.get("label")), single.get("config") or {}, rate_of(single["samples_per_s"])
        )
    speedup = number(best.get("speedup"))
    if speedup is None and baseline is not None and baseline.samples_per_s > 0:
        speedup = rate_of(best["samples_per_s"]) / baseline.samples_per_s
    return BestConfig(
        source="bench",
        label=config_label(best.get("config"), best.get("label")),
        config=best.get("config") or {},
        samples_per_s=rate_of(best["samples_per_s"]),
        speedup=speedup,
        baseline=baseline,
        result=best,
    )


def loader_arguments(config: dict) -> list[tuple[str, Any]]:
    """DataLoader keyword arguments for a config dict, in the order people write them.

    Built from the record rather than LoaderConfig.to_kwargs(): the report may be
    rendered on a machine whose torch lacks an argument the measured one had.
    """
    args: list[tuple[str, Any]] = []
    if _batch_size(config) is not None:
        args.append(("batch_size", config["batch_size"]))
    workers = _workers(config)
    args.append(("num_workers", workers))
    if workers > 0:
        args.append(("prefetch_factor", _prefetch(config)))
        if config.get("persistent_workers"):
            args.append(("persistent_workers", True))
        if config.get("multiprocessing_context"):
            args.append(("multiprocessing_context", config["multiprocessing_context"]))
        if config.get("in_order") is False:
            args.append(("in_order", False))
    if config.get("pin_memory"):
        args.append(("pin_memory", True))
    return args


def stage_facts(r: Record, *, top_hotspots: int = 8) -> StageFacts | None:
    stages = [s for s in r.get("stages") or [] if isinstance(s, dict) and number(s.get("ms_per_sample")) is not None]
    aug = _augmentation(r.get("augmentation_overhead"))
    hotspots = _hotspots(r.get("hotspots"), top_hotspots)
    if not stages and aug is None and not hotspots:
        return None
    total = sum(number(s["ms_per_sample"]) for s in stages)
    shares = [number(s.get("share")) for s in stages]
    # "share" is a fraction of the total; accept percentages from older writers.
    as_percent = all(v is not None for v in shares) and sum(shares) > 1.5
    rows = []
    for s, share in zip(stages, shares):
        ms = number(s["ms_per_sample"])
        if share is None:
            share = ms / total if total > 0 else 0.0
        elif as_percent:
            share = share / 100.0
        rows.append(StageRow(str(s.get("name", "?")), s.get("kind"), ms, share))
    top = max(rows, key=lambda row: row.ms_per_sample) if rows else None
    run = r.get("stage_run") if isinstance(r.get("stage_run"), dict) else {}
    notes = [str(n) for n in r.get("stage_notes") or [] if n]
    return StageFacts(rows=rows, total_ms=total, top=top, augmentation=aug, hotspots=hotspots, run=run, notes=notes)


def _augmentation(entry: Any) -> AugmentationFacts | None:
    if not isinstance(entry, dict):
        return None
    ms, pct = number(entry.get("ms_per_sample")), number(entry.get("percent"))
    if ms is None and pct is None:
        return None
    names = [str(n) for n in entry.get("transforms") or []]
    return AugmentationFacts(ms, pct, names, number(entry.get("with_ms_per_sample")),
                             number(entry.get("without_ms_per_sample")))


def _hotspots(entries: Any, top: int) -> list[Hotspot]:
    rows = []
    for h in entries or []:
        if not isinstance(h, dict):
            continue
        where = str(h.get("file", "?"))
        if h.get("line") is not None:
            where += f":{h['line']}"
        calls = h.get("calls")
        rows.append(
            Hotspot(str(h.get("function", "?")), where, calls if isinstance(calls, int) else None,
                    number(h.get("total_ms")), number(h.get("cumulative_ms")))
        )
    rows.sort(key=lambda h: h.cumulative_ms or h.total_ms or 0.0, reverse=True)
    return rows[:top]


def training_facts(r: Record) -> TrainingFacts | None:
    timeline = r.get("step_timeline") if isinstance(r.get("step_timeline"), dict) else {}
    data = [v for v in (number(x) for x in timeline.get("data_ms") or []) if v is not None]
    compute = [v for v in (number(x) for x in timeline.get("compute_ms") or []) if v is not None]
    measured = ("stall_fraction", "verdict", "what_if_speedup", "first_batch_s")
    if not data and not compute and all(r.get(k) is None for k in measured):
        return None
    advice = r.get("advice")
    if isinstance(advice, str):
        advice = [advice]
    steps = r.get("steps")
    verdict = r.get("verdict")
    mean_data = number((r.get("data_ms") or {}).get("mean")) if isinstance(r.get("data_ms"), dict) else None
    mean_compute = number((r.get("compute_ms") or {}).get("mean")) if isinstance(r.get("compute_ms"), dict) else None
    if mean_data is None or mean_compute is None:
        mean_data = sum(data) / len(data) if data else None
        mean_compute = sum(compute) / len(compute) if compute else None
    epoch_steps = r.get("epoch_steps")
    config = r.get("config")
    thresholds = r.get("thresholds") if isinstance(r.get("thresholds"), dict) else {}
    return TrainingFacts(
        verdict=verdict if isinstance(verdict, str) else None,
        stall_fraction=number(r.get("stall_fraction")),
        steps=steps if isinstance(steps, int) else None,
        gpu_util=number(r.get("gpu_util")),
        what_if_speedup=number(r.get("what_if_speedup")),
        first_batch_s=number(r.get("first_batch_s")),
        mean_data_ms=mean_data,
        mean_compute_ms=mean_compute,
        occupancy=r.get("occupancy"),
        ranks=[x for x in r.get("ranks") or [] if isinstance(x, dict)],
        advice=[str(a) for a in advice or [] if a],
        resources=r.get("resources") if isinstance(r.get("resources"), dict) else None,
        config_label=config_label(config, r.get("config_label")) if isinstance(config, dict) else None,
        epoch_steps=epoch_steps if isinstance(epoch_steps, int) and epoch_steps > 0 else None,
        first_batch_share=number(r.get("startup_share_per_epoch")),
        distributed=r.get("distributed") if isinstance(r.get("distributed"), dict) else None,
        input_bound_at=number(thresholds.get("input_bound_at")),
    )


def dataset_length(r: Record) -> int | None:
    length = (r.get("dataset") or {}).get("length")
    return length if isinstance(length, int) and not isinstance(length, bool) and length > 0 else None


def epoch_estimate(r: Record) -> EpochEstimate | None:
    """Epoch time = dataset length / steady-state rate, for the best and the baseline configs."""
    length = dataset_length(r)
    best = best_configuration(r)
    if length is None or best is None or best.samples_per_s <= 0:
        return None
    rows = [_epoch_row(r, "best", best.label, best.config, best.samples_per_s, length, best.result)]
    if best.baseline is not None and best.baseline.samples_per_s > 0:
        base = best.baseline
        rows.append(_epoch_row(r, "baseline", base.label, base.config, base.samples_per_s, length,
                               result_for_config(r, base.config)))
    saving = rows[1].seconds - rows[0].seconds if len(rows) == 2 else None
    return EpochEstimate(length=length, rows=rows, saving_s=saving)


def _epoch_row(r: Record, role: str, label: str, config: dict, rate: float, length: int, result: dict | None) -> EpochRow:
    bs = _batch_size(config)
    startup = number(result.get("startup_s")) if result else None
    return EpochRow(
        role=role,
        label=label,
        samples_per_s=rate,
        seconds=length / rate,
        batches=math.ceil(length / bs) if bs else None,
        startup_s=startup,
        persistent=bool(config.get("persistent_workers")),
    )


def batch_bytes_for(r: Record, batch_size: int | None) -> float | None:
    """Bytes of one collated batch at ``batch_size``, scaled from the measured one."""
    dataset = r.get("dataset") or {}
    measured = number(dataset.get("batch_bytes"))
    if measured is None or measured <= 0:
        return None
    ref = _batch_size(dataset)
    if ref is None or batch_size is None:
        return measured
    return measured * batch_size / ref


def memory_budget(r: Record) -> MemoryBudget | None:
    """In-flight batches (batch bytes × prefetch_factor × workers) against /dev/shm and RAM."""
    reference = number((r.get("dataset") or {}).get("batch_bytes"))
    if reference is None or reference <= 0:
        return None
    host = r.get("host") or {}
    shm = number(host.get("shm_free_bytes"))
    ram = number(host.get("memory_available_bytes"))
    candidates: list[tuple[str, str, dict, dict | None]] = []
    best = best_configuration(r)
    if best is not None and _workers(best.config) > 0:
        candidates.append(("best", best.label, best.config, best.result))
    rows = [_memory_row(r, *c, shm=shm, ram=ram) for c in candidates]
    measured = [res for res in ok_results(r) if _workers(res.get("config")) > 0]
    if measured:
        largest = max(measured, key=lambda res: _in_flight_bytes(r, res.get("config")))
        if best is None or not _same_config(largest.get("config"), best.config):
            rows.append(_memory_row(r, "largest", config_label(largest.get("config"), largest.get("label")),
                                    largest.get("config") or {}, largest, shm=shm, ram=ram))
    if not rows:
        return None
    return MemoryBudget(rows, shm, ram, _batch_size(r.get("dataset") or {}), reference)


def _in_flight_bytes(r: Record, config: Any) -> float:
    per_batch = batch_bytes_for(r, _batch_size(config)) or 0.0
    return per_batch * _prefetch(config) * _workers(config)


def _memory_row(r: Record, role: str, label: str, config: dict, result: dict | None, *,
                shm: float | None, ram: float | None) -> MemoryRow:
    workers, prefetch = _workers(config), _prefetch(config)
    per_batch = batch_bytes_for(r, _batch_size(config)) or 0.0
    in_flight = per_batch * prefetch * workers
    rss_mb = number(((result or {}).get("resources") or {}).get("workers_rss_mb"))
    rss = rss_mb * MIB if rss_mb is not None else None
    needed = in_flight + (rss or 0.0)
    return MemoryRow(
        role=role,
        label=label,
        workers=workers,
        prefetch_factor=prefetch,
        batch_size=_batch_size(config),
        batch_bytes=per_batch,
        in_flight_batches=prefetch * workers,
        in_flight_bytes=in_flight,
        shm_fraction=in_flight / shm if shm else None,
        workers_rss_bytes=rss,
        ram_needed_bytes=needed,
        ram_fraction=needed / ram if ram else None,
    )


def cpu_use(r: Record) -> CpuUse | None:
    cores = (r.get("host") or {}).get("cores")
    cores = cores if isinstance(cores, int) and cores > 0 else None
    rows: list[CpuRow] = []
    focus: CpuRow | None = None
    best = best_configuration(r)
    for res in ok_results(r):
        row = _cpu_row(config_label(res.get("config"), res.get("label")), _workers(res.get("config")),
                       res.get("resources"), cores)
        if row is None:
            continue
        rows.append(row)
        if best is not None and best.result is res:
            focus = row
    training = training_facts(r)
    if training is not None and training.resources is not None:
        row = _cpu_row("training loop", int(number(training.resources.get("n_workers")) or 0), training.resources, cores)
        if row is not None:
            rows.append(row)
            focus = focus or row
    if not rows:
        return None
    return CpuUse(cores=cores, rows=rows, focus=focus or rows[0])


def _cpu_row(label: str, workers: int, resources: Any, cores: int | None) -> CpuRow | None:
    if not isinstance(resources, dict):
        return None
    main, work = number(resources.get("main_cpu_percent")), number(resources.get("workers_cpu_percent"))
    if main is None or work is None:
        return None
    total = main + work
    return CpuRow(
        label=label,
        workers=workers,
        main_percent=main,
        workers_percent=work,
        total_percent=total,
        capacity_fraction=total / (cores * 100.0) if cores else None,
        main_rss_mb=number(resources.get("main_rss_mb")),
        workers_rss_mb=number(resources.get("workers_rss_mb")),
        worker_uss_mb=number(resources.get("worker_uss_mb")),
    )


# -- checklist rules -----------------------------------------------------------
ChecklistRule = Callable[[Record], Optional[CheckRow]]


def check_data_wait(r: Record) -> CheckRow | None:
    training = training_facts(r)
    if training is None or training.stall_fraction is None:
        return None
    goal = target("data_wait_fraction")
    if training.input_bound_at is not None:
        # Agree with the profiler's verdict: its input-bound threshold is the pass boundary.
        goal.good = training.input_bound_at
        goal.bad = max(goal.bad, training.input_bound_at)
    return CheckRow("Data wait share of step time", training.stall_fraction, "fraction", goal)


def check_gpu_utilisation(r: Record) -> CheckRow | None:
    training = training_facts(r)
    if training is None or training.gpu_util is None:
        return None
    return CheckRow("GPU utilisation", training.gpu_util, "percent", target("gpu_util_percent", higher_is_better=True))


def check_augmentation_overhead(r: Record) -> CheckRow | None:
    stages = stage_facts(r)
    if stages is None or stages.augmentation is None or stages.augmentation.percent is None:
        return None
    return CheckRow("Random-augmentation overhead", stages.augmentation.percent, "percent", target("augmentation_percent"))


def check_batch_time_consistency(r: Record) -> CheckRow | None:
    best = best_configuration(r)
    result = best.result if best else None
    latency = (result or {}).get("batch_ms") or {}
    p50, p95 = number(latency.get("p50")), number(latency.get("p95"))
    if not p50 or p95 is None:
        return None
    return CheckRow("Batch-time consistency (p95/p50)", p95 / p50, "ratio", target("batch_time_ratio"), best.label)


def check_parallel_efficiency(r: Record) -> CheckRow | None:
    best = best_configuration(r)
    eff = number((best.result or {}).get("efficiency")) if best else None
    if eff is None or _workers(best.config) == 0:
        return None
    return CheckRow("Parallel efficiency", eff, "fraction", target("parallel_efficiency", higher_is_better=True), best.label)


def check_measurement_noise(r: Record) -> CheckRow | None:
    best = best_configuration(r)
    noise = number((best.result or {}).get("noise")) if best else None
    if noise is None:
        return None
    return CheckRow("Measurement noise (max−min)/median", noise, "fraction", target("measurement_noise"), best.label)


def check_tuning_headroom(r: Record) -> CheckRow | None:
    best = best_configuration(r)
    if best is None or best.speedup is None or best.baseline is None:
        return None
    return CheckRow("Headroom over the baseline (best ÷ baseline)", best.speedup, "ratio", target("tuning_headroom"), best.baseline.label)


def check_shm_headroom(r: Record) -> CheckRow | None:
    budget = memory_budget(r)
    row = budget.rows[0] if budget else None
    if row is None or row.shm_fraction is None:
        return None
    return CheckRow("In-flight batches / free /dev/shm", row.shm_fraction, "fraction", target("shm_fraction"), row.label)


def check_ram_budget(r: Record) -> CheckRow | None:
    budget = memory_budget(r)
    row = budget.rows[0] if budget else None
    if row is None or row.ram_fraction is None:
        return None
    return CheckRow("Workers + in-flight batches / available RAM", row.ram_fraction, "fraction", target("ram_fraction"), row.label)


def check_startup_share(r: Record) -> CheckRow | None:
    epoch = epoch_estimate(r)
    row = epoch.rows[0] if epoch else None
    if row is None or row.startup_s is None or row.persistent or row.seconds <= 0:
        return None
    return CheckRow("Worker start-up / epoch time", row.startup_s / row.seconds, "fraction", target("startup_fraction"), row.label)


def check_error_findings(r: Record) -> CheckRow | None:
    facts = finding_facts(r)
    if facts is None:
        return None
    return CheckRow("Error findings", facts.counts.get("error", 0), "count", target("error_findings"))


CHECKLIST_RULES: list[ChecklistRule] = [
    check_data_wait,
    check_gpu_utilisation,
    check_augmentation_overhead,
    check_batch_time_consistency,
    check_parallel_efficiency,
    check_measurement_noise,
    check_tuning_headroom,
    check_shm_headroom,
    check_ram_budget,
    check_startup_share,
    check_error_findings,
]


def checklist(r: Record, rules: Sequence[ChecklistRule] | None = None) -> list[CheckRow]:
    rows = (rule(r) for rule in (CHECKLIST_RULES if rules is None else rules))
    return [row for row in rows if row is not None]


# -- findings ------------------------------------------------------------------
FindingRule = Callable[[dict, Record], dict]


def project_memory_growth(finding: dict, r: Record) -> dict[str, float]:
    """MB per 1,000 samples × the epoch's samples, per worker and for the best config's workers."""
    evidence = finding.get("evidence") or {}
    rate = next((number(v) for k, v in evidence.items() if "per_1000" in k and number(v) is not None), None)
    length = dataset_length(r)
    if rate is None or length is None:
        return {}
    per_worker = rate * length / 1000.0
    derived = {"mb_per_1000": rate, "epoch_samples": float(length), "epoch_mb_per_worker": per_worker}
    best = best_configuration(r)
    workers = _workers(best.config) if best else 0
    if workers > 0:
        derived.update(workers=float(workers), epoch_mb_all_workers=per_worker * workers)
    return derived


def relate_shm_to_budget(finding: dict, r: Record) -> dict[str, float]:
    budget = memory_budget(r)
    if budget is None or budget.shm_free_bytes is None:
        return {}
    row = max(budget.rows, key=lambda x: x.in_flight_bytes)
    return {"in_flight_bytes": row.in_flight_bytes, "shm_free_bytes": budget.shm_free_bytes,
            "in_flight_batches": float(row.in_flight_batches)}


def find_slowest_sample(finding: dict, r: Record) -> dict[str, float]:
    """The slowest outlier and the median fetch time, from the evidence (seconds)."""
    evidence = finding.get("evidence") or {}
    indices, seconds = evidence.get("indices") or [], evidence.get("seconds") or []
    times = [number(s) for s in seconds]
    if not times or len(times) != len(indices) or None in times:
        return {}
    slowest = max(range(len(times)), key=lambda i: times[i])
    derived = {"slowest_index": float(indices[slowest]) if number(indices[slowest]) is not None else -1.0,
               "slowest_s": times[slowest]}
    median = number(evidence.get("median_s"))
    if median:
        derived["median_s"] = median
    return derived if derived["slowest_index"] >= 0 else {}


def count_threads(finding: dict, r: Record) -> dict[str, float]:
    """Workers × threads per worker against the usable cores."""
    evidence = finding.get("evidence") or {}
    workers, per_worker = number(evidence.get("num_workers")), number(evidence.get("threads_per_worker"))
    cores = number(evidence.get("cores")) or number((r.get("host") or {}).get("cores"))
    if not workers or not per_worker or not cores:
        return {}
    return {"num_workers": workers, "threads_per_worker": per_worker, "threads": workers * per_worker, "cores": cores}


FINDING_RULES: dict[str, FindingRule] = {
    "memory-growth": project_memory_growth,
    "shm-too-small": relate_shm_to_budget,
    "slow-samples": find_slowest_sample,
    "oversubscription": count_threads,
}

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def finding_facts(r: Record, rules: dict[str, FindingRule] | None = None) -> FindingFacts | None:
    if "findings" not in r or not isinstance(r.get("findings"), list):
        return None
    rules = FINDING_RULES if rules is None else rules
    views = []
    for f in r["findings"]:
        if not isinstance(f, dict):
            continue
        code = str(f.get("code", "unknown"))
        rule = rules.get(code)
        views.append(
            FindingView(
                code=code,
                severity=str(f.get("severity", "info")),
                message=str(f.get("message", "")),
                evidence=f.get("evidence") if isinstance(f.get("evidence"), dict) else {},
                fix=str(f["fix"]) if f.get("fix") else None,
                derived=rule(f, r) if rule else {},
            )
        )
    views.sort(key=lambda v: SEVERITY_ORDER.get(v.severity, 3))
    counts = {sev: sum(1 for v in views if v.severity == sev) for sev in SEVERITY_ORDER}
    return FindingFacts(views, counts)


# -- recommendations -----------------------------------------------------------
RecommendationRule = Callable[[Record], Optional[Recommendation]]


def recommend_best_config(r: Record) -> Recommendation | None:
    best = best_configuration(r)
    good, _ = TARGETS["tuning_headroom"]
    if best is None or best.baseline is None or best.speedup is None or best.speedup < good:
        return None
    return Recommendation(
        id="use-best-config",
        source="analysis",
        values={"label": best.label, "samples_per_s": best.samples_per_s, "baseline": best.baseline.label,
                "baseline_samples_per_s": best.baseline.samples_per_s, "speedup": best.speedup},
    )


def recommend_persistent_workers(r: Record) -> Recommendation | None:
    epoch = epoch_estimate(r)
    row = epoch.rows[0] if epoch else None
    good, _ = TARGETS["startup_fraction"]
    if row is None or row.persistent or row.startup_s is None or row.seconds <= 0:
        return None
    if row.startup_s / row.seconds < good:
        return None
    return Recommendation(
        id="persistent-workers",
        source="analysis",
        values={"label": row.label, "startup_s": row.startup_s, "epoch_s": row.seconds,
                "fraction": row.startup_s / row.seconds},
    )


RECOMMENDATION_RULES: list[RecommendationRule] = [recommend_best_config, recommend_persistent_workers]

# Record recommendations (by id) that already give a derived one's advice: the tuner's pick, the profiler's
# epoch start-up advice.
SAME_ADVICE: dict[str, set[str]] = {
    "use-best-config": {"loader-config"},
    "persistent-workers": {"profile-epoch-startup"},
}


def recommendations(r: Record, rules: Sequence[RecommendationRule] | None = None) -> list[Recommendation]:
    """The record's recommendations first, then derived ones whose id the record lacks."""
    out: list[Recommendation] = []
    seen: set[str] = set()
    for rec in r.get("recommendations") or []:
        if not isinstance(rec, dict):
            continue
        rid = str(rec.get("id") or f"recommendation-{len(out) + 1}")
        if rid in seen:
            continue
        seen.add(rid)
        out.append(Recommendation(rid, "record", rec.get("title"), rec.get("detail"), rec.get("measured"),
                                  rec.get("expected_gain")))
    for rule in RECOMMENDATION_RULES if rules is None else rules:
        rec = rule(r)
        if rec is not None and rec.id not in seen and not SAME_ADVICE.get(rec.id, set()) & seen:
            seen.add(rec.id)
            out.append(rec)
    return out


# -- verdict -------------------------------------------------------------------
VerdictRule = Callable[[Record], Optional[Verdict]]


def verdict_from_errors(r: Record) -> Verdict | None:
    facts = finding_facts(r)
    errors = [f.code for f in facts.findings if f.severity == "error"] if facts else []
    if not errors:
        return None
    return Verdict("unsafe", {"errors": len(errors), "codes": sorted(set(errors))})


def verdict_from_training(r: Record) -> Verdict | None:
    training = training_facts(r)
    if training is None or training.verdict is None:
        return None
    return Verdict(training.verdict, {"stall_fraction": training.stall_fraction, "steps": training.steps,
                                      "what_if_speedup": training.what_if_speedup})


def verdict_from_headroom(r: Record) -> Verdict | None:
    best = best_configuration(r)
    if best is None or best.baseline is None or best.speedup is None:
        return None
    good, _ = TARGETS["tuning_headroom"]
    label = "loader-limited" if best.speedup >= good else "near-optimal"
    return Verdict(label, {"best": best.label, "samples_per_s": best.samples_per_s, "baseline": best.baseline.label,
                           "baseline_samples_per_s": best.baseline.samples_per_s, "speedup": best.speedup})


def verdict_from_sweep(r: Record) -> Verdict | None:
    bench = bench_facts(r)
    if bench is None or bench.best is None:
        return None
    return Verdict("measured", {"best": bench.best.label, "samples_per_s": bench.best.samples_per_s,
                                "configurations": bench.measured})


def verdict_from_stages(r: Record) -> Verdict | None:
    stages = stage_facts(r)
    if stages is None or stages.top is None:
        return None
    return Verdict("stage-bound", {"stage": stages.top.name, "ms_per_sample": stages.top.ms_per_sample,
                                   "share": stages.top.share})


def verdict_from_clean_checks(r: Record) -> Verdict | None:
    facts = finding_facts(r)
    if facts is None:
        return None
    return Verdict("no errors", {"warnings": facts.counts["warning"], "infos": facts.counts["info"]})


VERDICT_RULES: list[VerdictRule] = [
    verdict_from_errors,
    verdict_from_training,
    verdict_from_headroom,
    verdict_from_sweep,
    verdict_from_stages,
    verdict_from_clean_checks,
]


def verdict(r: Record, rules: Sequence[VerdictRule] | None = None) -> Verdict | None:
    for rule in VERDICT_RULES if rules is None else rules:
        found = rule(r)
        if found is not None:
            return found
    return None


# -- everything ----------------------------------------------------------------
def analyse(record: Any) -> ReportFacts:
    """All the facts a report states, from a RunRecord or its dict."""
    r = as_record_dict(record)
    return ReportFacts(
        command=str(r.get("command", "?")),
        target=str(r.get("target", "?")),
        verdict=verdict(r),
        bench=bench_facts(r),
        tuning=tuning_facts(r),
        best=best_configuration(r),
        stages=stage_facts(r),
        training=training_facts(r),
        epoch=epoch_estimate(r),
        memory=memory_budget(r),
        cpu=cpu_use(r),
        checklist=checklist(r),
        findings=finding_facts(r),
        recommendations=recommendations(r),
    )
