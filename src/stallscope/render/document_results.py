"""Report sections on what was measured: the bench sweep, the tuner, the stage breakdown and the
training loop (the config to use is the verdict's, ``document_verdict``). Each builder returns
``(section, headline)``; ``None`` where the facts are absent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..analysis import (
    BenchFacts,
    BenchRow,
    StageFacts,
    TrainingFacts,
    TuningFacts,
)
from ..analysis.readers import number, workers_of
from ..analysis.run_verdict import decide
from ..errors import not_tried
from ..text import plural
from ..thresholds import TIE_MARGIN
from . import document_model as dm
from . import report_format as rf
from .document_checks import evidence_value
from .document_windows import long_run_blocks


# -- benchmark ---------------------------------------------------------------------
def bench_section(bench: BenchFacts, r: dict[str, Any]) -> tuple[dm.Section, dm.Text | None]:
    if bench.measured == 0:
        blocks: list[dm.Block] = [
            dm.Paragraph([f"All {plural(bench.failed, 'configuration')} failed:"]),
            dm.table(
                bench.rows,
                [
                    dm.Column("Configuration", lambda row: dm.Code(row.label)),
                    dm.Column("error", lambda row: row.error or rf.DASH),
                ],
            ),
        ]
        return dm.Section("benchmark", "Benchmark", blocks), None
    intro = f"{plural(bench.measured, 'configuration')} measured"
    if bench.repeats:
        intro += f", {bench.repeats} interleaved repeats each (median, with min–max in brackets)"
    if bench.cores:
        intro += f", on {bench.cores} usable cores"
    if bench.batches_timed and bench.window_s:
        intro += (
            f"; rates come from {bench.batches_timed:,} batches timed over "
            f"{rf.fmt_seconds(bench.window_s)} of steady state, start-up excluded"
        )
    if bench.delivered_to:
        intro += f"; each batch was copied to the GPU ({bench.delivered_to}) before the clock read"
    intro += "."
    if bench.single_process_ms_per_sample is not None:
        intro += (
            f" Single-process cost: {rf.fmt_ms(bench.single_process_ms_per_sample)} per sample."
        )
    if bench.failed:
        intro += (
            f" {plural(bench.failed, 'configuration')} failed or not tried; see below the table."
        )
    blocks = [dm.Paragraph([intro]), dm.table(bench.rows, _BENCH_COLUMNS)]
    failed = [row for row in bench.rows if row.error]
    if failed:
        blocks.append(
            dm.Bullets(
                [
                    [
                        dm.Code(row.label),
                        f" {row.error}" if not_tried(row.error) else f" failed: {row.error}",
                    ]
                    for row in failed
                ]
            )
        )
    headline: dm.Text | None = None
    if bench.best is not None:
        best = bench.best
        per_epoch = bench.best_per_epoch
        parts: dm.Text = (
            [
                "Fastest in the sweep per epoch, start-ups included: ",
                dm.config_code(best.label),
                f" at {rf.fmt_rate(per_epoch)} samples/s per epoch "
                f"({rf.fmt_rate(best.samples_per_s)} in steady state)",
            ]
            if per_epoch is not None
            else [
                "Fastest in the sweep: ",
                dm.config_code(best.label),
                f" at {rf.fmt_rate(best.samples_per_s)} samples/s",
            ]
        )
        if best.speedup is not None:
            parts.append(f", {rf.fmt_ratio(best.speedup)} the single-process loader")
        if best.efficiency is not None and workers_of(best.config) > 0:
            parts.append(f", at {rf.fmt_fraction(best.efficiency)} parallel efficiency")
        parts.append(".")
        if (
            bench.plateau_workers is not None
            and len(bench.worker_counts) > 1
            and per_epoch is None  # a plateau of the steady state, which did not decide
        ):
            if bench.plateau_workers < bench.worker_counts[-1]:
                parts.append(f" Throughput stops improving at {bench.plateau_workers} workers")
                parts.append(f" on {bench.cores} usable cores." if bench.cores else ".")
            else:
                parts.append(
                    f" Throughput was still rising at {bench.worker_counts[-1]} workers, the most "
                    "measured."
                )
        if bench.latency_bound:
            parts.append(
                f" The best uses {workers_of(best.config)} workers on {bench.cores} cores and "
                f"beats one process by more than {bench.cores}×, so the source is latency-bound: "
                "extra workers overlap waiting, not computation."
            )
        blocks.append(dm.Paragraph(parts))
        headline = [
            f"Fastest of {plural(bench.measured, 'configuration')} in the sweep: ",
            dm.config_code(best.label),
            ", ",
            f"{rf.fmt_rate(best.samples_per_s)} samples/s",
        ]
        if best.speedup is not None:
            headline.append(f" ({rf.fmt_ratio(best.speedup)} the single-process loader)")
        headline.append(".")
    blocks.append(
        dm.Figure("scaling", "Throughput against num_workers, with the ideal scaling line")
    )
    blocks.append(dm.Figure("latency", "Distribution of steady-state batch waits"))
    return dm.Section("benchmark", "Benchmark", blocks), headline


def _rate_range(row: BenchRow) -> str:
    """The median rate, with the repeats' min–max in brackets; "failed" for a config that failed."""
    if row.error:
        return "not tried" if not_tried(row.error) else "failed"
    rate = rf.fmt_rate(row.samples_per_s)
    if row.min_samples_per_s is not None and row.max_samples_per_s is not None:
        rate += f" [{rf.fmt_rate(row.min_samples_per_s)}–{rf.fmt_rate(row.max_samples_per_s)}]"
    return rate


def _unless_failed(cell: Callable[[BenchRow], dm.Cell]) -> Callable[[BenchRow], dm.Cell]:
    """A column's cell, or a dash for a configuration that failed."""
    return lambda row: rf.DASH if row.error else cell(row)


_BENCH_COLUMNS: list[dm.Column[BenchRow]] = [
    dm.Column(
        "Configuration", lambda row: dm.Strong(row.label) if row.is_best else dm.Code(row.label)
    ),
    dm.Column("samples/s median [min–max]", _rate_range, "r"),
    dm.Column("start-up", _unless_failed(lambda row: rf.fmt_seconds(row.startup_s)), "r"),
    dm.Column("p50 batch", _unless_failed(lambda row: rf.fmt_ms(row.p50_ms)), "r"),
    dm.Column("p95 batch", _unless_failed(lambda row: rf.fmt_ms(row.p95_ms)), "r"),
    dm.Column("efficiency", _unless_failed(lambda row: rf.fmt_fraction(row.efficiency)), "r"),
    dm.Column("speed-up", _unless_failed(lambda row: rf.fmt_ratio(row.speedup)), "r"),
    dm.Column("noise", _unless_failed(lambda row: rf.fmt_fraction(row.noise)), "r"),
]


# -- tuning --------------------------------------------------------------------------
def tuning_section(tuning: TuningFacts, r: dict[str, Any]) -> tuple[dm.Section, dm.Text | None]:
    parts: dm.Text = [f"The tuner measured {plural(tuning.trials, 'trial')}"]
    if tuning.seconds is not None:
        parts.append(f" in {rf.fmt_seconds(tuning.seconds)}")
    parts += [" and chose ", *_pick_text(tuning, " at ", baseline_rate=True)]
    if tuning.runner_up and tuning.margin:
        parts += [
            "; the runner-up ",
            dm.config_code(tuning.runner_up),
            f" ran at {rf.fmt_fraction(1.0 / tuning.margin)} of it",
        ]
    confidence = number(tuning.confidence)
    if confidence is not None and (tuning.rounds or 0) >= 2:
        parts.append(f"; confidence: {rf.fmt_fraction(confidence)}")
        if tuning.rounds is not None:
            parts.append(f" over {plural(tuning.rounds, 'interleaved round')}")
    parts.append(".")
    blocks: list[dm.Block] = [dm.Paragraph(parts)]
    if tuning.plan:
        blocks.append(
            dm.Paragraph(
                ["Budget plan: ", *dm.record_text(tuning.plan.removeprefix("plan: ")), "."]
            )
        )
    if tuning.tie:
        within = rf.fmt_percent(
            100 * (tuning.tie_margin if tuning.tie_margin is not None else TIE_MARGIN)
        )
        blocks.append(
            dm.Paragraph(
                [
                    dm.Strong("A tie within noise; the cheaper config was kept"),
                    f": another raced config was within {within} of the fastest, paired by round.",
                ]
            )
        )
    if tuning.confirmed is False:
        blocks.append(
            dm.Paragraph(
                [
                    dm.Strong("Not confirmed: the budget ran out"),
                    f" after {plural(tuning.rounds or 0, 'interleaved round')}, so there is "
                    "no confidence.",
                ]
            )
        )
    if tuning.keep_baseline and tuning.baseline is not None:
        blocks.append(
            dm.Paragraph(
                [
                    dm.Strong("Keep yours:"),
                    " your loader ",
                    dm.config_code(tuning.baseline.label),
                    f" is within {rf.fmt_percent(tuning.within_pct)} of the best found; no "
                    "change is recommended.",
                ]
            )
        )
    if tuning.head_to_head:
        decision = decide(r)
        blocks.append(
            dm.Paragraph(["Raced head to head, in the same interleaved rounds (median samples/s):"])
        )
        blocks.append(
            dm.table(
                tuning.head_to_head,
                [
                    dm.Column("Configuration", lambda h: dm.Code(h.label)),
                    dm.Column(
                        "Role", lambda h: rf.fmt_role(h.role, picked=decision.names(h.config))
                    ),
                    dm.Column("samples/s", lambda h: rf.fmt_rate(h.samples_per_s), "r"),
                    dm.Column("Rounds", lambda h: rf.fmt_count(h.rounds), "r"),
                ],
            )
        )
    if tuning.skipped:
        blocks.append(dm.Paragraph(["Skipped:"]))
        blocks.append(
            dm.Bullets(
                [[dm.Code(label), ": ", *dm.record_text(why)] for label, why in tuning.skipped]
            )
        )
    gap = tuning.persistent
    if gap is not None and gap.gap_without_s is not None and gap.gap_with_s is not None:
        verdict = "recommended" if gap.recommended else "not recommended"
        blocks.append(
            dm.Paragraph(
                [
                    "Epoch boundary at ",
                    dm.Code(gap.measured_on),
                    f": {rf.fmt_seconds(gap.gap_without_s)} without and "
                    f"{rf.fmt_seconds(gap.gap_with_s)} with persistent workers, so "
                    f"persistent_workers=True is {verdict}.",
                ]
            )
        )
    if tuning.region:
        text = f"The tuner classified the source as {tuning.region}"
        blocks.append(
            dm.Paragraph([text + (f": {tuning.region_reason}." if tuning.region_reason else ".")])
        )
    if tuning.top_trials:
        blocks.append(dm.Paragraph([f"The {plural(len(tuning.top_trials), 'fastest trial')}:"]))
        blocks.append(
            dm.table(
                tuning.top_trials,
                [
                    dm.Column("Phase", lambda t: t.phase or rf.DASH),
                    dm.Column("Configuration", lambda t: dm.Code(t.label)),
                    dm.Column("samples/s", lambda t: rf.fmt_rate(t.samples_per_s), "r"),
                    dm.Column("vs baseline", lambda t: rf.fmt_ratio(t.vs_baseline), "r"),
                ],
            )
        )
    # A failure the search notes already explain is not listed twice.
    failed = [
        (label, error)
        for label, error in tuning.failed_trials
        if not any(error in n for n in tuning.notes)
    ]
    if failed:
        blocks.append(dm.Paragraph([f"{plural(len(failed), 'trial')} failed:"]))
        blocks.append(
            dm.Bullets([[dm.Code(label), ": ", *dm.record_text(error)] for label, error in failed])
        )
    if tuning.notes:
        blocks.append(dm.Paragraph(["Search notes:"]))
        blocks.append(dm.Bullets([dm.record_text(note) for note in tuning.notes]))
    headline: dm.Text = ["Tuning"]
    if tuning.seconds is not None:
        headline.append(f" ({rf.fmt_seconds(tuning.seconds)}, {plural(tuning.trials, 'trial')})")
    headline += [" chose ", *_pick_text(tuning, ": ", baseline_rate=False)]
    if tuning.keep_baseline:
        headline.append(": within the noise, so keep yours")
    if tuning.confirmed is False:
        headline.append(" (not confirmed: the budget ran out)")
    headline.append(".")
    return dm.Section("tuning", "Tuning", blocks), headline


def _pick_text(tuning: TuningFacts, before_rate: str, *, baseline_rate: bool) -> dm.Text:
    """The tuner's pick and its rate, then its speed-up over the baseline where both are known (with
    the baseline's own rate where ``baseline_rate``)."""
    text: dm.Text = [
        dm.config_code(tuning.best.label),
        f"{before_rate}{rf.fmt_rate(tuning.best.samples_per_s)} samples/s",
    ]
    if tuning.baseline is not None and tuning.speedup is not None:
        text += [
            f", {rf.fmt_ratio(tuning.speedup)} the baseline ",
            dm.config_code(tuning.baseline.label),
        ]
        if baseline_rate:
            text.append(f" ({rf.fmt_rate(tuning.baseline.samples_per_s)} samples/s)")
    return text


# -- stages ---------------------------------------------------------------------------
def stage_section(stages: StageFacts, r: dict[str, Any]) -> tuple[dm.Section, dm.Text | None]:
    blocks: list[dm.Block] = []
    headline: dm.Text = []
    if stages.rows and stages.top is not None:
        top = stages.top
        run = stages.run
        if isinstance(run.get("samples"), int) and isinstance(run.get("num_workers"), int):
            text = f"Measured over {run['samples']:,} samples"
            if isinstance(run.get("batches"), int):
                text += f" in {run['batches']:,} batches"
            if isinstance(run.get("batch_size"), int):
                text += f" of {run['batch_size']}"
            text += (
                f", inside {plural(run['num_workers'], 'worker')}"
                if run["num_workers"]
                else ", in the main process"
            )
            if run.get("start_method") and run["num_workers"]:
                text += f" ({run['start_method']})"
            blocks.append(dm.Paragraph([text + "."]))
        blocks.append(
            dm.Paragraph(
                [
                    f"{plural(len(stages.rows), 'stage')} sum to {rf.fmt_ms(stages.total_ms)} "
                    f"per sample; the largest is {top.name} at {rf.fmt_ms(top.ms_per_sample)} "
                    f"({rf.fmt_fraction(top.share)})."
                ]
            )
        )
        blocks.append(
            dm.table(
                stages.rows,
                [
                    dm.Column("Stage", lambda row: row.name),
                    dm.Column("kind", lambda row: row.kind or rf.DASH),
                    dm.Column(
                        "per sample",
                        lambda row: "doubtful" if row.doubtful else rf.fmt_ms(row.ms_per_sample),
                        "r",
                    ),
                    dm.Column(
                        "share",
                        lambda row: rf.DASH if row.doubtful else rf.fmt_fraction(row.share),
                        "r",
                    ),
                ],
                footer=[dm.Strong("total"), "", dm.Strong(rf.fmt_ms(stages.total_ms)), ""],
            )
        )
        doubtful = [row for row in stages.rows if row.doubtful]
        if doubtful:
            blocks.append(
                dm.Bullets(
                    [[f"{row.name} is doubtful, not counted: {row.doubtful}."] for row in doubtful]
                )
            )
        blocks.append(dm.Figure("stages", "Per-sample time by stage"))
        headline = [
            f"Largest stage: {top.name}, {rf.fmt_ms(top.ms_per_sample)} per sample "
            f"({rf.fmt_fraction(top.share)} of {rf.fmt_ms(stages.total_ms)})."
        ]
    aug = stages.augmentation
    if aug is not None:
        text = "Random augmentation"
        if aug.transforms:
            text += f" ({', '.join(aug.transforms)})"
        amounts = []
        if aug.ms_per_sample is not None:
            amounts.append(f"{rf.fmt_ms(aug.ms_per_sample)} per sample")
        if aug.percent is not None:
            amounts.append(f"{rf.fmt_percent(aug.percent)} over the pipeline without it")
        sentence = f"{text} adds {', '.join(amounts)}"
        if aug.with_ms is not None and aug.without_ms is not None:
            sentence += (
                f" ({rf.fmt_ms(aug.with_ms)} per sample with it, {rf.fmt_ms(aug.without_ms)} "
                "without)"
            )
        sentence += "."
        blocks.append(dm.Paragraph([sentence]))
        headline = [*headline, " " if headline else "", sentence]
    if stages.notes:
        blocks.append(dm.Bullets([dm.record_text(note) for note in stages.notes]))
    if stages.hotspots:
        blocks.append(
            dm.Paragraph(
                [
                    f"Top {plural(len(stages.hotspots), 'Python hot spot')} of ",
                    dm.Code("__getitem__"),
                    " by cumulative time (cProfile):",
                ]
            )
        )
        blocks.append(
            dm.table(
                stages.hotspots,
                [
                    dm.Column("Function", lambda h: dm.Code(h.function)),
                    dm.Column("where", lambda h: h.location),
                    dm.Column("calls", lambda h: rf.fmt_count(h.calls), "r"),
                    dm.Column("own time", lambda h: rf.fmt_ms(h.total_ms), "r"),
                    dm.Column("cumulative", lambda h: rf.fmt_ms(h.cumulative_ms), "r"),
                ],
            )
        )
    return dm.Section("stages", "Stage breakdown", blocks), [p for p in headline if p] or None


# -- training loop ---------------------------------------------------------------------
def training_section(t: TrainingFacts, r: dict[str, Any]) -> tuple[dm.Section, dm.Text | None]:
    blocks: list[dm.Block] = []
    first: dm.Text = []
    if t.stall_fraction is not None:
        text = "The loop"
        if t.config_label:
            first += [text + " (loader ", dm.config_code(t.config_label), ")"]
            text = ""
        text += f" waited for data {rf.fmt_fraction(t.stall_fraction)} of the time"
        if t.steps is not None:
            text += f" over {rf.fmt_count(t.steps)} steps"
        if t.mean_data_ms is not None and t.mean_compute_ms is not None:
            text += (
                f" (mean {rf.fmt_ms(t.mean_data_ms)} data wait and {rf.fmt_ms(t.mean_compute_ms)} "
                "compute per step)"
            )
        first.append(text + ".")
    if t.verdict:
        first.append(f" Verdict: {t.verdict}.")
    if t.what_if_speedup is not None:
        first.append(
            f" If data were free the loop would run {rf.fmt_ratio(t.what_if_speedup)} faster."
        )
    if t.gpu_util is not None:
        first.append(f" Mean GPU utilisation was {rf.fmt_percent(t.gpu_util)}.")
    if t.first_batch_s is not None:
        text = f" The first batch took {rf.fmt_seconds(t.first_batch_s)}"
        if t.mean_data_ms is not None and t.mean_compute_ms is not None:
            text += f", against a mean step of {rf.fmt_ms(t.mean_data_ms + t.mean_compute_ms)}"
        if t.first_batch_share is not None and t.epoch_steps is not None:
            text += (
                f"; over an epoch of {rf.fmt_count(t.epoch_steps)} steps that is "
                f"{rf.fmt_fraction(t.first_batch_share)} of the time"
            )
        first.append(text + ".")
    if first:
        if isinstance(first[0], str):
            first[0] = first[0].lstrip()
        blocks.append(dm.Paragraph(first))
    occupancy = _occupancy_text(t.occupancy)
    if occupancy:
        blocks.append(dm.Paragraph([occupancy]))
    if t.distributed:
        blocks.append(dm.Paragraph([_distributed_text(t.distributed)]))
    if t.ranks:
        keys = [k for k in t.ranks[0] if not isinstance(t.ranks[0][k], (dict, list))]
        blocks.append(
            dm.Table(
                [k.replace("_", " ") for k in keys],
                [[evidence_value(k, rank.get(k)) for k in keys] for rank in t.ranks],
                "l" * len(keys),
            )
        )
    if t.advice:
        blocks.append(dm.Bullets([dm.record_text(a) for a in t.advice]))
    blocks.append(dm.Figure("timeline", "Data wait and compute per training step"))
    blocks.extend(long_run_blocks(r))
    headline: dm.Text | None = None
    if t.verdict and t.stall_fraction is not None:
        headline = [
            f"The training loop is {t.verdict}: it waited for data "
            f"{rf.fmt_fraction(t.stall_fraction)} of step time"
        ]
        if t.steps is not None:
            headline.append(f" over {rf.fmt_count(t.steps)} steps")
        if t.what_if_speedup is not None:
            headline.append(f"; free data would make it {rf.fmt_ratio(t.what_if_speedup)} faster")
        headline.append(".")
    return dm.Section("training", "Training loop", blocks), headline


def _occupancy_text(occupancy: Any) -> str:
    if (
        isinstance(occupancy, dict)
        and number(occupancy.get("mean_ready")) is not None
        and number(occupancy.get("capacity"))
    ):
        text = (
            f"Prefetch buffer: on average {rf.fmt_value(occupancy['mean_ready'])} of "
            f"{rf.fmt_value(occupancy['capacity'])} slots held a ready batch"
        )
        empty, full = (
            number(occupancy.get("empty_fraction")),
            number(occupancy.get("full_fraction")),
        )
        if empty is not None and full is not None:
            text += (
                f"; it was empty {rf.fmt_fraction(empty)} and full {rf.fmt_fraction(full)} of "
                "the time"
            )
        return text + "."
    if isinstance(occupancy, dict) and occupancy:
        return "Prefetch-buffer occupancy (ready batches waiting): " + rf.fmt_value(occupancy) + "."
    if number(occupancy) is not None:
        return f"Mean prefetch-buffer occupancy (ready batches waiting): {rf.fmt_value(occupancy)}."
    return ""


def _distributed_text(d: dict[str, Any]) -> str:
    if d.get("slowest_rank") is None or number(d.get("max_data_wait_ms_per_step")) is None:
        return "Across ranks: " + rf.fmt_value(d) + "."
    text = "Across "
    text += f"{d['world_size']} ranks" if isinstance(d.get("world_size"), int) else "the ranks"
    text += (
        f" the slowest, rank {d['slowest_rank']}, waited "
        f"{rf.fmt_ms(d['max_data_wait_ms_per_step'])} per step for data"
    )
    if number(d.get("min_data_wait_ms_per_step")) is not None:
        text += f" against {rf.fmt_ms(d['min_data_wait_ms_per_step'])} on the fastest"
    if number(d.get("max_stall_fraction")) is not None:
        text += (
            "; the job runs at its pace, a stall fraction of "
            f"{rf.fmt_fraction(d['max_stall_fraction'])}"
        )
    return text + "."
