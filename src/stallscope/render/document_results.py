"""Report sections on what was measured: the bench sweep, the tuner, the best configuration, the stage
breakdown and the training loop. Each builder returns ``(section, headline)``; ``None`` where the facts
are absent."""

from __future__ import annotations

from typing import Any

from ..analysis import ReportFacts, loader_arguments
from ..analysis.readers import number, workers_of
from .document_checks import evidence_value
from .document_model import (
    Bullets,
    Cell,
    Code,
    CodeBlock,
    Figure,
    Paragraph,
    Section,
    Strong,
    Table,
    config_code,
    plural,
    record_text,
)
from .report_format import (
    DASH,
    fmt_count,
    fmt_fraction,
    fmt_ms,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    fmt_value,
)


# -- benchmark ---------------------------------------------------------------------
def bench_section(facts: ReportFacts, r: dict):
    bench = facts.bench
    if bench is None:
        return None, None
    if bench.measured == 0:
        rows = [[Code(row.label), row.error or DASH] for row in bench.rows]
        blocks = [Paragraph([f"All {plural(bench.failed, 'configuration')} failed:"]), Table(["Configuration", "error"], rows)]
        return Section("benchmark", "Benchmark", blocks), None
    intro = f"{plural(bench.measured, 'configuration')} measured"
    if bench.repeats:
        intro += f", {bench.repeats} interleaved repeats each (median, with min–max in brackets)"
    if bench.cores:
        intro += f", on {bench.cores} usable cores"
    if bench.batches_timed and bench.window_s:
        intro += (f"; rates come from {bench.batches_timed:,} batches timed over {fmt_seconds(bench.window_s)} of "
                  "steady state, start-up excluded")
    intro += "."
    if bench.single_process_ms_per_sample is not None:
        intro += f" Single-process cost: {fmt_ms(bench.single_process_ms_per_sample)} per sample."
    if bench.failed:
        intro += f" {plural(bench.failed, 'configuration')} failed; see below the table."
    rows = []
    for row in bench.rows:
        label: Cell = Strong(row.label) if row.is_best else Code(row.label)
        if row.error:
            rows.append([label, "failed", DASH, DASH, DASH, DASH, DASH, DASH])
            continue
        rate = fmt_rate(row.samples_per_s)
        if row.min_samples_per_s is not None and row.max_samples_per_s is not None:
            rate += f" [{fmt_rate(row.min_samples_per_s)}–{fmt_rate(row.max_samples_per_s)}]"
        rows.append([
            label, rate, fmt_seconds(row.startup_s), fmt_ms(row.p50_ms), fmt_ms(row.p95_ms),
            fmt_fraction(row.efficiency), fmt_ratio(row.speedup), fmt_fraction(row.noise),
        ])
    blocks: list = [
        Paragraph([intro]),
        Table(["Configuration", "samples/s median [min–max]", "start-up", "p50 batch", "p95 batch", "efficiency",
               "speed-up", "noise"], rows, "lrrrrrrr"),
    ]
    failed = [row for row in bench.rows if row.error]
    if failed:
        blocks.append(Bullets([[Code(row.label), f" failed: {row.error}"] for row in failed]))
    headline = None
    if bench.best is not None:
        best = bench.best
        parts: list = ["Fastest: ", config_code(best.label), f" at {fmt_rate(best.samples_per_s)} samples/s"]
        if best.speedup is not None:
            parts.append(f", {fmt_ratio(best.speedup)} the single-process loader")
        if best.efficiency is not None and workers_of(best.config) > 0:
            parts.append(f", at {fmt_fraction(best.efficiency)} parallel efficiency")
        parts.append(".")
        if bench.plateau_workers is not None and len(bench.worker_counts) > 1:
            if bench.plateau_workers < bench.worker_counts[-1]:
                parts.append(f" Throughput stops improving at {bench.plateau_workers} workers")
                parts.append(f" on {bench.cores} usable cores." if bench.cores else ".")
            else:
                parts.append(f" Throughput was still rising at {bench.worker_counts[-1]} workers, the most "
                             "measured.")
        if bench.latency_bound:
            parts.append(f" The best uses {workers_of(best.config)} workers on {bench.cores} cores and beats one process "
                         f"by more than {bench.cores}×, so the source is latency-bound: extra workers overlap waiting, "
                         "not computation.")
        blocks.append(Paragraph(parts))
        headline = [f"Fastest of {plural(bench.measured, 'benchmarked configuration')}: ", config_code(best.label), ", ",
                    f"{fmt_rate(best.samples_per_s)} samples/s"]
        if best.speedup is not None:
            headline.append(f" ({fmt_ratio(best.speedup)} the single-process loader)")
        headline.append(".")
    blocks.append(Figure("scaling", "Throughput against num_workers, with the ideal scaling line"))
    blocks.append(Figure("latency", "Distribution of steady-state batch waits"))
    return Section("benchmark", "Benchmark", blocks), headline


# -- tuning --------------------------------------------------------------------------
def tuning_section(facts: ReportFacts, r: dict):
    tuning = facts.tuning
    if tuning is None:
        return None, None
    parts: list = [f"The tuner measured {plural(tuning.trials, 'trial')}"]
    if tuning.seconds is not None:
        parts.append(f" in {fmt_seconds(tuning.seconds)}")
    parts += [" and chose ", config_code(tuning.best.label), f" at {fmt_rate(tuning.best.samples_per_s)} samples/s"]
    if tuning.baseline is not None and tuning.speedup is not None:
        parts += [f", {fmt_ratio(tuning.speedup)} the baseline ", config_code(tuning.baseline.label),
                  f" ({fmt_rate(tuning.baseline.samples_per_s)} samples/s)"]
    if tuning.runner_up and tuning.margin is not None:
        parts += [f", {fmt_fraction(tuning.margin - 1.0)} faster than the runner-up ", config_code(tuning.runner_up)]
    if tuning.confidence is not None:
        parts.append(f"; confidence: {fmt_value(tuning.confidence)}")
        if tuning.rounds is not None:
            parts.append(f" over {plural(tuning.rounds, 'interleaved round')}")
    parts.append(".")
    blocks: list = [Paragraph(parts)]
    if tuning.plan:
        blocks.append(Paragraph(["Budget plan: ", *record_text(tuning.plan.removeprefix("plan: ")), "."]))
    if tuning.confirmed is False:
        blocks.append(Paragraph([Strong("Not confirmed: the budget ran out"),
                                 f" after {plural(tuning.rounds or 0, 'interleaved round')}, so there is no confidence."]))
    if tuning.keep_baseline and tuning.baseline is not None:
        blocks.append(Paragraph([Strong("Keep yours:"), " your loader ", config_code(tuning.baseline.label),
                                 f" is within {fmt_percent(tuning.within_pct)} of the best found; no change is recommended."]))
    if tuning.head_to_head:
        rows = [[Code(h.label), h.role, fmt_rate(h.samples_per_s), fmt_count(h.rounds)] for h in tuning.head_to_head]
        blocks.append(Paragraph(["Raced head to head, in the same interleaved rounds (median samples/s):"]))
        blocks.append(Table(["Configuration", "Role", "samples/s", "Rounds"], rows, "llrr"))
    if tuning.skipped:
        blocks.append(Paragraph(["Skipped:"]))
        blocks.append(Bullets([[Code(label), ": ", *record_text(why)] for label, why in tuning.skipped]))
    gap = tuning.persistent
    if gap is not None and gap.gap_without_s is not None and gap.gap_with_s is not None:
        verdict = "recommended" if gap.recommended else "not recommended"
        blocks.append(Paragraph([
            "Epoch boundary at ", Code(gap.measured_on), f": {fmt_seconds(gap.gap_without_s)} without and "
            f"{fmt_seconds(gap.gap_with_s)} with persistent workers, so persistent_workers=True is {verdict}."]))
    if tuning.region:
        text = f"The tuner classified the source as {tuning.region}"
        blocks.append(Paragraph([text + (f": {tuning.region_reason}." if tuning.region_reason else ".")]))
    if tuning.top_trials:
        rows = [[t.phase or DASH, Code(t.label), fmt_rate(t.samples_per_s), fmt_ratio(t.vs_baseline)]
                for t in tuning.top_trials]
        blocks.append(Paragraph([f"The {plural(len(rows), 'fastest trial')}:"]))
        blocks.append(Table(["Phase", "Configuration", "samples/s", "vs baseline"], rows, "llrr"))
    # A failure the search notes already explain is not listed twice.
    failed = [(label, error) for label, error in tuning.failed_trials if not any(error in n for n in tuning.notes)]
    if failed:
        blocks.append(Paragraph([f"{plural(len(failed), 'trial')} failed:"]))
        blocks.append(Bullets([[Code(label), ": ", *record_text(error)] for label, error in failed]))
    if tuning.notes:
        blocks.append(Paragraph(["Search notes:"]))
        blocks.append(Bullets([record_text(note) for note in tuning.notes]))
    headline: list = ["Tuning"]
    if tuning.seconds is not None:
        headline.append(f" ({fmt_seconds(tuning.seconds)}, {plural(tuning.trials, 'trial')})")
    headline += [" chose ", config_code(tuning.best.label), f": {fmt_rate(tuning.best.samples_per_s)} samples/s"]
    if tuning.baseline is not None and tuning.speedup is not None:
        headline += [f", {fmt_ratio(tuning.speedup)} the baseline ", config_code(tuning.baseline.label)]
    if tuning.keep_baseline:
        headline.append(": within the noise, so keep yours")
    if tuning.confirmed is False:
        headline.append(" (not confirmed: the budget ran out)")
    headline.append(".")
    return Section("tuning", "Tuning", blocks), headline


# -- best configuration ----------------------------------------------------------------
def best_section(facts: ReportFacts, r: dict):
    best = facts.best
    if best is None:
        return None, None
    if best.keep_baseline and best.best_found is not None:
        parts: list = [Strong("Keep yours:"), " your loader ", config_code(best.label),
                       f" is within {fmt_percent(best.within_pct)} of the best found, ", config_code(best.best_found.label),
                       f" ({fmt_rate(best.samples_per_s)} vs {fmt_rate(best.best_found.samples_per_s)} samples/s); "
                       "no change is recommended. As DataLoader arguments, unchanged:"]
        return Section("best-configuration", "Best configuration", [Paragraph(parts), CodeBlock(_snippet(best.config), "python")]), None
    where = "by the tuner" if best.source == "tune" else "in the benchmark sweep"
    parts = [config_code(best.label), f" measured {fmt_rate(best.samples_per_s)} samples/s {where}"]
    if best.baseline is not None and best.speedup is not None:
        parts += [f", {fmt_ratio(best.speedup)} ", config_code(best.baseline.label),
                  f" ({fmt_rate(best.baseline.samples_per_s)} samples/s)"]
    if best.overruled is not None:
        parts += ["; the tuner's pick ", config_code(best.overruled.label),
                  f" ({fmt_rate(best.overruled.samples_per_s)} samples/s) never raced it head to head and was slower "
                  "beyond the noise"]
    parts.append(". As DataLoader arguments:")
    return Section("best-configuration", "Best configuration", [Paragraph(parts), CodeBlock(_snippet(best.config), "python")]), None


def _snippet(config: dict) -> str:
    lines = []
    threads = config.get("torch_threads")
    if isinstance(threads, int) and not isinstance(threads, bool):
        lines += ["import torch", f"torch.set_num_threads({threads})"]
    lines.append("from torch.utils.data import DataLoader")
    lines.append("")
    if config.get("batched_fetch"):
        lines.append("# batched_fetch: the dataset's __getitems__(indices) returns a whole batch per call")
    lines.append("loader = DataLoader(")
    lines.append("    dataset,")
    lines += [f"    {name}={value!r}," for name, value in loader_arguments(config)]
    lines.append(")")
    return "\n".join(lines)


# -- stages ---------------------------------------------------------------------------
def stage_section(facts: ReportFacts, r: dict):
    stages = facts.stages
    if stages is None:
        return None, None
    blocks: list = []
    headline: list = []
    if stages.rows and stages.top is not None:
        top = stages.top
        run = stages.run
        if isinstance(run.get("samples"), int) and isinstance(run.get("num_workers"), int):
            text = f"Measured over {run['samples']:,} samples"
            if isinstance(run.get("batches"), int):
                text += f" in {run['batches']:,} batches"
            if isinstance(run.get("batch_size"), int):
                text += f" of {run['batch_size']}"
            text += f", inside {plural(run['num_workers'], 'worker')}" if run["num_workers"] else ", in the main process"
            if run.get("start_method") and run["num_workers"]:
                text += f" ({run['start_method']})"
            blocks.append(Paragraph([text + "."]))
        blocks.append(Paragraph([f"{plural(len(stages.rows), 'stage')} sum to {fmt_ms(stages.total_ms)} per sample; the "
                                 f"largest is {top.name} at {fmt_ms(top.ms_per_sample)} "
                                 f"({fmt_fraction(top.share)})."]))
        rows = [[row.name, row.kind or DASH, fmt_ms(row.ms_per_sample), fmt_fraction(row.share)] for row in stages.rows]
        rows.append([Strong("total"), "", Strong(fmt_ms(stages.total_ms)), ""])
        blocks.append(Table(["Stage", "kind", "per sample", "share"], rows, "llrr"))
        blocks.append(Figure("stages", "Per-sample time by stage"))
        headline = [f"Largest stage: {top.name}, {fmt_ms(top.ms_per_sample)} per sample "
                    f"({fmt_fraction(top.share)} of {fmt_ms(stages.total_ms)})."]
    aug = stages.augmentation
    if aug is not None:
        text = "Random augmentation"
        if aug.transforms:
            text += f" ({', '.join(aug.transforms)})"
        amounts = []
        if aug.ms_per_sample is not None:
            amounts.append(f"{fmt_ms(aug.ms_per_sample)} per sample")
        if aug.percent is not None:
            amounts.append(f"{fmt_percent(aug.percent)} over the pipeline without it")
        sentence = f"{text} adds {', '.join(amounts)}"
        if aug.with_ms is not None and aug.without_ms is not None:
            sentence += f" ({fmt_ms(aug.with_ms)} per sample with it, {fmt_ms(aug.without_ms)} without)"
        sentence += "."
        blocks.append(Paragraph([sentence]))
        headline = [*headline, " " if headline else "", sentence]
    if stages.notes:
        blocks.append(Bullets([record_text(note) for note in stages.notes]))
    if stages.hotspots:
        blocks.append(Paragraph([f"Top {plural(len(stages.hotspots), 'Python hot spot')} of ", Code("__getitem__"),
                                 " by cumulative time (cProfile):"]))
        rows = [[Code(h.function), h.location, fmt_count(h.calls), fmt_ms(h.total_ms), fmt_ms(h.cumulative_ms)]
                for h in stages.hotspots]
        blocks.append(Table(["Function", "where", "calls", "own time", "cumulative"], rows, "llrrr"))
    return Section("stages", "Stage breakdown", blocks), [p for p in headline if p] or None


# -- training loop ---------------------------------------------------------------------
def training_section(facts: ReportFacts, r: dict):
    t = facts.training
    if t is None:
        return None, None
    blocks: list = []
    first: list = []
    if t.stall_fraction is not None:
        text = "The loop"
        if t.config_label:
            first += [text + " (loader ", config_code(t.config_label), ")"]
            text = ""
        text += f" waited for data {fmt_fraction(t.stall_fraction)} of the time"
        if t.steps is not None:
            text += f" over {fmt_count(t.steps)} steps"
        if t.mean_data_ms is not None and t.mean_compute_ms is not None:
            text += (f" (mean {fmt_ms(t.mean_data_ms)} data wait and {fmt_ms(t.mean_compute_ms)} compute per "
                     "step)")
        first.append(text + ".")
    if t.verdict:
        first.append(f" Verdict: {t.verdict}.")
    if t.what_if_speedup is not None:
        first.append(f" If data were free the loop would run {fmt_ratio(t.what_if_speedup)} faster.")
    if t.gpu_util is not None:
        first.append(f" Mean GPU utilisation was {fmt_percent(t.gpu_util)}.")
    if t.first_batch_s is not None:
        text = f" The first batch took {fmt_seconds(t.first_batch_s)}"
        if t.mean_data_ms is not None and t.mean_compute_ms is not None:
            text += f", against a mean step of {fmt_ms(t.mean_data_ms + t.mean_compute_ms)}"
        if t.first_batch_share is not None and t.epoch_steps is not None:
            text += f"; over an epoch of {fmt_count(t.epoch_steps)} steps that is {fmt_fraction(t.first_batch_share)} of the time"
        first.append(text + ".")
    if first:
        if isinstance(first[0], str):
            first[0] = first[0].lstrip()
        blocks.append(Paragraph(first))
    occupancy = _occupancy_text(t.occupancy)
    if occupancy:
        blocks.append(Paragraph([occupancy]))
    if t.distributed:
        blocks.append(Paragraph([_distributed_text(t.distributed)]))
    if t.ranks:
        keys = [k for k in t.ranks[0] if not isinstance(t.ranks[0][k], (dict, list))]
        blocks.append(Table([k.replace("_", " ") for k in keys],
                            [[evidence_value(k, rank.get(k)) for k in keys] for rank in t.ranks], "l" * len(keys)))
    if t.advice:
        blocks.append(Bullets([record_text(a) for a in t.advice]))
    blocks.append(Figure("timeline", "Data wait and compute per training step"))
    headline = None
    if t.verdict and t.stall_fraction is not None:
        headline = [f"The training loop is {t.verdict}: it waited for data {fmt_fraction(t.stall_fraction)} of step "
                    "time"]
        if t.steps is not None:
            headline.append(f" over {fmt_count(t.steps)} steps")
        if t.what_if_speedup is not None:
            headline.append(f"; free data would make it {fmt_ratio(t.what_if_speedup)} faster")
        headline.append(".")
    return Section("training", "Training loop", blocks), headline


def _occupancy_text(occupancy: Any) -> str:
    if isinstance(occupancy, dict) and number(occupancy.get("mean_ready")) is not None \
            and number(occupancy.get("capacity")):
        text = (f"Prefetch buffer: on average {fmt_value(occupancy['mean_ready'])} of "
                f"{fmt_value(occupancy['capacity'])} slots held a ready batch")
        empty, full = number(occupancy.get("empty_fraction")), number(occupancy.get("full_fraction"))
        if empty is not None and full is not None:
            text += f"; it was empty {fmt_fraction(empty)} and full {fmt_fraction(full)} of the time"
        return text + "."
    if isinstance(occupancy, dict) and occupancy:
        return "Prefetch-buffer occupancy (ready batches waiting): " + fmt_value(occupancy) + "."
    if number(occupancy) is not None:
        return f"Mean prefetch-buffer occupancy (ready batches waiting): {fmt_value(occupancy)}."
    return ""


def _distributed_text(d: dict) -> str:
    if d.get("slowest_rank") is None or number(d.get("max_data_wait_ms_per_step")) is None:
        return "Across ranks: " + fmt_value(d) + "."
    text = "Across "
    text += f"{d['world_size']} ranks" if isinstance(d.get("world_size"), int) else "the ranks"
    text += (f" the slowest, rank {d['slowest_rank']}, waited {fmt_ms(d['max_data_wait_ms_per_step'])} per step for "
             "data")
    if number(d.get("min_data_wait_ms_per_step")) is not None:
        text += f" against {fmt_ms(d['min_data_wait_ms_per_step'])} on the fastest"
    if number(d.get("max_stall_fraction")) is not None:
        text += f"; the job runs at its pace, a stall fraction of {fmt_fraction(d['max_stall_fraction'])}"
    return text + "."


