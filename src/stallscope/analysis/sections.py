"""Per-section facts: the bench sweep, the tuner's trials, the configuration to recommend, the stage
breakdown and the training loop. Each returns ``None`` when the record lacks that section."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..record import model
from ..record.model import (
    BatchMs,
    BenchResult,
    HeadToHead,
    Hotspot,
    PersistentWorkers,
    Region,
    Spread,
    Trial,
    baseline_of,
    best_of,
    hotspots_of,
    results_of,
    search_of,
    stages_of,
    trials_of,
)
from ..thresholds import TIE_MARGIN
from .facts import (
    AugmentationFacts,
    BenchFacts,
    BenchRow,
    BestConfig,
    ConfigRate,
    HeadToHeadRow,
    HotspotRow,
    PersistentGap,
    StageFacts,
    StageRow,
    TrainingFacts,
    TrialRow,
    TuningFacts,
)
from .invariants import checked_confidence, ran_label, relabel
from .readers import (
    Record,
    batch_size_of,
    config_label,
    number,
    ok_results,
    recorded_mean,
    result_for_config,
    single_process_result,
    steady_config,
    workers_of,
)
from .sweep_epochs import best_result, sweep_epochs
from .training import profile_advice, profile_verdict
from .tune_rules import epoch_rule, is_tune_section, keeps_yours

# A sweep is latency-bound when its best speed-up over one process beats the core count by this
# factor: 10% is beyond the noise of a speed-up, itself the ratio of two noisy rates.
LATENCY_BOUND_MARGIN = 1.1


def delivered_to(r: Record) -> str | None:
    """The GPU every measured batch was copied to before the clock read (NOTE [delivered to the
    device]: wherever the record's host has one), or None."""
    gpu = (r.get("host") or {}).get("gpu")
    return gpu if isinstance(gpu, str) and gpu else None


def bench_facts(r: Record) -> BenchFacts | None:
    results = results_of(r)
    if not results:
        return None
    best = best_result(r)
    rows = []
    for res in results:
        spread = res.samples_per_s or Spread()
        latency = res.batch_ms or BatchMs()
        rows.append(
            BenchRow(
                label=ran_label(r, res.config, res.label),
                config=res.config,
                samples_per_s=res.rate,
                min_samples_per_s=spread.min,
                max_samples_per_s=spread.max,
                startup_s=res.startup_s,
                p50_ms=latency.p50,
                p95_ms=latency.p95,
                efficiency=res.efficiency,
                speedup=res.speedup,
                noise=res.noise,
                repeats=res.repeats,
                error=res.error or None,
                is_best=res == best,
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
    timed = [res.batches_measured for res in ok if res.batches_measured is not None]
    windows = [res.window_s for res in ok if res.window_s is not None]
    epochs = sweep_epochs(r)
    return BenchFacts(
        best_per_epoch=epochs.rate_of(best.config) if epochs and best else None,
        delivered_to=delivered_to(r),
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
        worker_counts=sorted({workers_of(row.config) for row in measured}),
        # More workers than cores is no evidence by itself (a noisy tie can land there);
        # a speed-up over one process beyond the core count is: the workers overlap waits.
        latency_bound=bool(
            best_row
            and cores
            and workers_of(best_row.config) > cores
            and best_row.speedup is not None
            and best_row.speedup > cores * LATENCY_BOUND_MARGIN
        ),
    )


def tuning_facts(r: Record, *, top: int = 10) -> TuningFacts | None:
    best = best_of(r)
    if best is None or (best_value := best.samples_per_s) is None:
        return None
    best_rate = ConfigRate(ran_label(r, best.config, best.label), best.config, best_value)
    baseline = _config_rate(r, baseline_of(r))
    speedup = best.speedup
    if speedup is None and baseline and baseline.samples_per_s > 0:
        speedup = best_rate.samples_per_s / baseline.samples_per_s
    trials = trials_of(r)
    measured = [t for t in trials if not t.error and (t.samples_per_s or 0.0) > 0]
    # measured holds positive rates only: the "or 0.0" never applies
    ranked = sorted(measured, key=lambda t: t.samples_per_s or 0.0, reverse=True)[:top]
    rows = []
    for t in ranked:
        rate = t.samples_per_s or 0.0
        vs = rate / baseline.samples_per_s if baseline and baseline.samples_per_s > 0 else None
        rows.append(TrialRow(ran_label(r, t.config, t.label), t.phase, rate, vs))
    failed = [(ran_label(r, t.config, t.label), t.error) for t in trials if t.error]
    search = search_of(r)
    region = search.region or Region()
    return TuningFacts(
        baseline=baseline,
        best=best_rate,
        speedup=speedup,
        # A confidence the rounds cannot support is dropped here (NOTE [invariants]); the
        # verdict says so.
        confidence=checked_confidence(best.confidence, best.rounds)[0],
        seconds=number(r.get("tuning_seconds")),
        trials=len(trials),
        top_trials=rows,
        failed_trials=failed,
        runner_up=relabel(r, best.runner_up) if best.runner_up else None,
        margin=best.margin,
        region=region.name,
        region_reason=region.reason,
        notes=[n for n in search.notes if n],
        rounds=best.rounds,
        confirmed=best.confirmed,
        head_to_head=_head_to_head(r, best.head_to_head),
        skipped=[(relabel(r, str(s.label)), str(s.why)) for s in best.skipped],
        keep_baseline=best.keep_baseline,
        within_pct=best.within_pct,
        plan=(search.plan or {}).get("summary"),
        persistent=_persistent_gap(search.persistent_workers),
        tie=best.tie,
        tie_margin=best.tie_margin,
    )


def _head_to_head(r: Record, entries: tuple[HeadToHead, ...]) -> list[HeadToHeadRow]:
    return [
        HeadToHeadRow(
            ran_label(r, e.config, e.label), e.config, e.samples_per_s, e.rounds, e.role or "other"
        )
        for e in entries
        if e.samples_per_s is not None
    ]


def _persistent_gap(entry: PersistentWorkers | None) -> PersistentGap | None:
    if entry is None:
        return None
    return PersistentGap(
        entry.measured_on or "",
        entry.gap_without_s,
        entry.gap_with_s,
        entry.saved_s,
        entry.recommended is True,
    )


def trials_by_config(
    trials: Sequence[Trial | Mapping[str, Any]], r: Record | None = None
) -> list[dict[str, Any]]:
    """One row per config of the tuner's trials: the phases it was measured in, its median rate and
    start-up over the runs, the runs; fastest first."""
    rows: dict[str, dict[str, Any]] = {}
    for t in filter(None, map(Trial.of, trials)):
        label = (
            ran_label(r, t.config, t.label) if r is not None else config_label(t.config, t.label)
        )
        row = rows.setdefault(
            label, {"label": label, "phases": [], "rates": [], "startup": [], "error": None}
        )
        if t.phase and t.phase not in row["phases"]:
            row["phases"].append(t.phase)
        rate = t.samples_per_s
        if t.error or rate is None:
            row["error"] = t.error or "no rate measured"
        else:
            row["rates"].append(rate)
            if t.startup_s is not None:
                row["startup"].append(t.startup_s)
    out = []
    for row in rows.values():
        row["rate"] = statistics.median(row["rates"]) if row["rates"] else None
        row["startup_s"] = statistics.median(row["startup"]) if row["startup"] else None
        out.append(row)
    return sorted(out, key=lambda r: -(r["rate"] or 0.0))


def _config_rate(r: Record, entry: model.ConfigRate | None) -> ConfigRate | None:
    if entry is None or entry.samples_per_s is None:
        return None
    return ConfigRate(ran_label(r, entry.config, entry.label), entry.config, entry.samples_per_s)


def best_configuration(r: Record) -> BestConfig | None:
    """The one configuration the report recommends (issue 10, "one winner").

    The tuner's pick, unless the sweep measured a config faster beyond the noise
    that never raced the pick head to head (:func:`unraced_faster_sweep_best`);
    the user's own config when the best found is within its noise ("keep yours", the one rule
    :func:`~.tune_rules.keeps_yours` that ``tune`` and ``doctor`` share).
    Without a tuner, the sweep's best.
    """
    tuning = tuning_facts(r)
    if tuning is not None:
        keep = tuning.keep_baseline or (is_tune_section(r) and keeps_yours(r))
        if keep and tuning.baseline is not None:
            within = tuning.within_pct
            if within is None and tuning.best.samples_per_s > 0:
                within = max(
                    0.0, (1 - tuning.baseline.samples_per_s / tuning.best.samples_per_s) * 100
                )
            return BestConfig(
                source="tune",
                label=tuning.baseline.label,
                config=tuning.baseline.config,
                samples_per_s=tuning.baseline.samples_per_s,
                speedup=1.0,
                baseline=tuning.baseline,
                result=result_for_config(r, tuning.baseline.config),
                snippet=loader_snippet(r, tuning.baseline.config),
                keep_baseline=True,
                within_pct=within,
                best_found=tuning.best,
            )
        if unraced_faster_sweep_best(r, tuning) is None:
            return BestConfig(
                source="tune",
                label=tuning.best.label,
                config=tuning.best.config,
                samples_per_s=tuning.best.samples_per_s,
                speedup=tuning.speedup,
                baseline=tuning.baseline,
                result=result_for_config(r, tuning.best.config),
                snippet=loader_snippet(r, tuning.best.config),
            )
    best = best_result(r)
    if best is None:
        return None
    single = single_process_result(r, batch_size_of(best.config))
    # best_result and single_process_result return only results with a rate: "or 0.0" never applies
    best_rate = best.rate or 0.0
    baseline = None
    if single is not None and single != best:
        baseline = ConfigRate(
            ran_label(r, single.config, single.label), single.config, single.rate or 0.0
        )
    speedup = best.speedup
    epochs = sweep_epochs(r)
    if epochs is not None:
        # The rate per epoch decided (sweep_epochs): the best's and its baseline's are per epoch.
        best_rate = epochs.rate_of(best.config) or best_rate
        if baseline is not None:
            baseline.samples_per_s = epochs.rate_of(baseline.config) or baseline.samples_per_s
        speedup = None
    if speedup is None and baseline is not None and baseline.samples_per_s > 0:
        speedup = best_rate / baseline.samples_per_s
    return BestConfig(
        source="bench",
        label=ran_label(r, best.config, best.label),
        config=best.config,
        samples_per_s=best_rate,
        speedup=speedup,
        baseline=baseline,
        result=best,
        snippet=loader_snippet(r, best.config),
        overruled=tuning.best if tuning is not None else None,
    )


def unraced_faster_sweep_best(r: Record, tuning: TuningFacts) -> BenchResult | None:
    """The sweep's best when it beat the tuner's pick by more than the noise without racing it, else
    None.

    Rule: a report never recommends a config that another config in the same
    report beat by more than the noise, unless the two raced head to head
    (then the race's paired rounds are the better evidence).
    """
    sweep = best_result(r)
    if sweep is None or tuning.best is None:
        return None
    if epoch_rule(r) is not None:
        # The rate per epoch decided the pick (NOTE [per-epoch rate]); the sweep measured the
        # steady state only, which is not the evidence that decides here.
        return None
    raced = [row.config for row in tuning.head_to_head]
    if any(steady_config(c) == steady_config(sweep.config) for c in raced):
        return None
    if steady_config(sweep.config) == steady_config(tuning.best.config):
        return None
    noise = max(TIE_MARGIN, sweep.noise or 0.0, search_of(r).noise or 0.0)
    sweep_rate = sweep.rate or 0.0
    return sweep if sweep_rate > tuning.best.samples_per_s * (1 + noise) else None


def loader_snippet(r: Record, config: dict[str, Any]) -> str:
    """The user's own loader call with ``config``'s knobs, as ``--emit python`` writes it, where
    that code was run before (NOTE [verified snippets] in pipeline/verify.py); else ""."""
    advice = r["loader_code"] if isinstance(r.get("loader_code"), dict) else {}
    if not advice.get("verified") or advice.get("config") != config:
        return ""
    return str(advice.get("python") or "")


def stage_facts(r: Record, *, top_hotspots: int = 8) -> StageFacts | None:
    stages = [s for s in stages_of(r) if s.ms_per_sample is not None]
    aug = _augmentation(r.get("augmentation_overhead"))
    hotspots = _hotspots(hotspots_of(r), top_hotspots)
    if not stages and aug is None and not hotspots:
        return None
    # stages hold numeric ms_per_sample only: the "or 0.0" below never applies
    total = sum(s.ms_per_sample or 0.0 for s in stages if not s.doubtful)
    shares = [s.share for s in stages]
    # "share" is a fraction of the total; accept percentages from older writers.
    as_percent = all(v is not None for v in shares) and sum(v or 0.0 for v in shares) > 1.5
    rows = []
    for s, share in zip(stages, shares):
        ms = s.ms_per_sample or 0.0
        if share is None:
            share = ms / total if total > 0 else 0.0
        elif as_percent:
            share = share / 100.0
        doubtful = str(s.doubtful) if s.doubtful else None
        rows.append(StageRow(s.name, s.kind, ms, 0.0 if doubtful else share, doubtful))
    trusted = [row for row in rows if not row.doubtful]
    top = max(trusted, key=lambda row: row.ms_per_sample) if trusted else None
    run = r["stage_run"] if isinstance(r.get("stage_run"), dict) else {}
    notes = [str(n) for n in r.get("stage_notes") or [] if n]
    return StageFacts(
        rows=rows,
        total_ms=total,
        top=top,
        augmentation=aug,
        hotspots=hotspots,
        run=run,
        notes=notes,
    )


def _augmentation(entry: Any) -> AugmentationFacts | None:
    if not isinstance(entry, dict):
        return None
    ms, pct = number(entry.get("ms_per_sample")), number(entry.get("percent"))
    if ms is None and pct is None:
        return None
    names = [str(n) for n in entry.get("transforms") or []]
    return AugmentationFacts(
        ms,
        pct,
        names,
        number(entry.get("with_ms_per_sample")),
        number(entry.get("without_ms_per_sample")),
    )


def _hotspots(entries: list[Hotspot], top: int) -> list[HotspotRow]:
    rows = []
    for h in entries:
        where = h.file if h.line is None else f"{h.file}:{h.line}"
        rows.append(HotspotRow(h.function, where, h.calls, h.total_ms, h.cumulative_ms))
    rows.sort(key=lambda h: h.cumulative_ms or h.total_ms or 0.0, reverse=True)
    return rows[:top]


def training_facts(r: Record) -> TrainingFacts | None:
    timeline = r["step_timeline"] if isinstance(r.get("step_timeline"), dict) else {}
    data = [v for v in (number(x) for x in timeline.get("data_ms") or []) if v is not None]
    compute = [v for v in (number(x) for x in timeline.get("compute_ms") or []) if v is not None]
    measured = ("stall_fraction", "verdict", "what_if_speedup", "first_batch_s")
    if not data and not compute and all(r.get(k) is None for k in measured):
        return None
    # Today's rules on the measurements: advice stored in an older record is not read.
    advice = profile_advice(r)
    steps = r.get("steps")
    verdict = profile_verdict(r)
    mean_data, mean_compute = recorded_mean(r, "data_ms"), recorded_mean(r, "compute_ms")
    if mean_data is None or mean_compute is None:
        mean_data = sum(data) / len(data) if data else None
        mean_compute = sum(compute) / len(compute) if compute else None
    epoch_steps = r.get("epoch_steps")
    config = r.get("config")
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
        advice=[advice] if advice else [],
        resources=r.get("resources") if isinstance(r.get("resources"), dict) else None,
        config_label=config_label(config, r.get("config_label"))
        if isinstance(config, dict)
        else None,
        epoch_steps=epoch_steps if isinstance(epoch_steps, int) and epoch_steps > 0 else None,
        first_batch_share=number(r.get("startup_share_per_epoch")),
        distributed=r.get("distributed") if isinstance(r.get("distributed"), dict) else None,
    )
