"""The report as a small document model, built once from the analysis facts.

The Markdown and HTML renderers both serialise this model, so the two reports
say the same thing. Every sentence here is assembled from measured values
(``stallscope.analysis.report``); a section whose facts are absent is left out.
Numbers are printed only through ``report_format``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from ..analysis import report as an
from .report_format import (
    DASH,
    fmt_bytes,
    fmt_count,
    fmt_fraction,
    fmt_mib,
    fmt_ms,
    fmt_percent,
    fmt_quantity,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    fmt_value,
)


# -- the model -----------------------------------------------------------------
@dataclass
class Code:
    """Inline code (a config label, an argument)."""

    text: str


@dataclass
class Strong:
    text: str


Inline = Union[str, Code, Strong]
Text = list  # a list of Inline


@dataclass
class Status:
    """A checklist mark: pass, warn or fail."""

    value: str


Cell = Union[str, Code, Strong, Status, list]


@dataclass
class Paragraph:
    parts: list
    style: str = ""  # "verdict <label>" marks the executive verdict


@dataclass
class Bullets:
    items: list  # each a list of Inline


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Cell]]
    align: str = ""  # one letter per column: l or r (default l)


@dataclass
class CodeBlock:
    text: str
    language: str = ""


@dataclass
class Figure:
    name: str  # plots.PLOTS key
    caption: str


@dataclass
class Section:
    key: str  # anchor id
    title: str
    blocks: list = field(default_factory=list)
    subsections: list[Section] = field(default_factory=list)


@dataclass
class Document:
    title: str
    intro: list
    sections: list[Section]

    def figures(self) -> list[Figure]:
        found: list[Figure] = []

        def walk(section: Section) -> None:
            found.extend(b for b in section.blocks if isinstance(b, Figure))
            for sub in section.subsections:
                walk(sub)

        for section in self.sections:
            walk(section)
        return found


def record_text(text: Any) -> list:
    """A string from the record, with its `backtick` spans as inline code."""
    pieces = str(text).split("`")
    if len(pieces) % 2 == 0:  # unbalanced backticks: keep the text as it is
        return [str(text)]
    return [Code(p) if i % 2 else p for i, p in enumerate(pieces) if p]


def plain_text(parts: Sequence[Any]) -> str:
    """Inline parts as plain text (for captions and console output)."""
    out = []
    for part in parts:
        out.append(part if isinstance(part, str) else part.text if isinstance(part, (Code, Strong)) else str(part))
    return "".join(out)


# -- building --------------------------------------------------------------------
def build_document(record: Any) -> Document:
    """The report for one record: only the sections its data supports."""
    r = an.as_record_dict(record)
    facts = an.analyse(r)
    headlines: list[list] = []
    sections: list[Section] = []
    builders = (
        _bench_section,
        _tuning_section,
        _best_section,
        _stage_section,
        _training_section,
        _epoch_section,
        _memory_section,
        _cpu_section,
        _checklist_section,
        _findings_section,
        _recommendations_section,
        _troubleshooting_section,
    )
    for build in builders:
        section, headline = build(facts, r)
        # A section with nothing but figures would be empty wherever the plot has no data.
        if section is not None and (section.subsections or any(not isinstance(b, Figure) for b in section.blocks)):
            sections.append(section)
        if headline:
            headlines.append(headline)
    summary = _summary_section(facts, headlines)
    if summary is not None:
        sections.insert(0, summary)
    return Document(title=f"stallscope {facts.command} report", intro=_intro(r), sections=sections)


def _intro(r: dict) -> list:
    blocks: list = []
    parts: list = ["Target ", Code(str(r.get("target", "?")))]
    started = an.number(r.get("started_at"))
    if started:
        parts.append(", run " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)))
    duration = an.number(r.get("duration_s"))
    if duration is not None:
        parts.append(f" for {fmt_seconds(duration)}")
    parts.append(f" with stallscope {r.get('tool_version', '?')}.")
    blocks.append(Paragraph(parts))
    host = _host_sentence(r.get("host") or {})
    if host:
        blocks.append(Paragraph(host))
    if r.get("partial"):
        blocks.append(Paragraph([Strong("Partial run:"), " the command was interrupted; the sections below hold "
                                 "what was measured before it stopped."]))
    return blocks


def _host_sentence(host: dict) -> list:
    facts = []
    if isinstance(host.get("cores"), int):
        text = f"{host['cores']} usable cores"
        if isinstance(host.get("logical_cpus"), int):
            text += f" of {host['logical_cpus']} logical CPUs"
        facts.append(text)
    if an.number(host.get("memory_bytes")):
        text = f"{fmt_bytes(host['memory_bytes'])} RAM"
        if an.number(host.get("memory_available_bytes")) is not None:
            text += f" ({fmt_bytes(host['memory_available_bytes'])} available)"
        facts.append(text)
    if an.number(host.get("shm_free_bytes")) is not None:
        facts.append(f"{fmt_bytes(host['shm_free_bytes'])} free in /dev/shm")
    if host.get("python"):
        facts.append(f"Python {host['python']}")
    if host.get("torch"):
        facts.append(f"torch {host['torch']}")
    if host.get("gpu"):
        facts.append(f"GPU {host['gpu']}" + (f" (CUDA {host['cuda']})" if host.get("cuda") else ""))
    elif "gpu" in host:
        facts.append("no CUDA device")
    if host.get("platform"):
        facts.append(str(host["platform"]))
    return ["Host: " + ", ".join(facts) + "."] if facts else []


def _n(count: int, noun: str) -> str:
    """``1 error``, ``2 errors``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _cfg(label: str) -> Code:
    return Code(label)


# -- executive summary -------------------------------------------------------------
def _summary_section(facts: an.ReportFacts, headlines: list[list]) -> Section | None:
    blocks: list = []
    if facts.verdict is not None:
        blocks.append(Paragraph([Strong(f"Verdict: {facts.verdict.label}."), " ", *_verdict_text(facts.verdict)],
                                style="verdict " + facts.verdict.label.replace(" ", "-")))
    if headlines:
        blocks.append(Bullets(headlines))
    return Section("summary", "Executive summary", blocks) if blocks else None


def _verdict_text(v: an.Verdict) -> list:
    x = v.values
    if v.label == "unsafe":
        return [f"{_n(x['errors'], 'error finding')} ({', '.join(x['codes'])}): loading fails or misbehaves until "
                + ("it is" if x["errors"] == 1 else "they are") + " fixed, whatever the loader settings."]
    if v.label in ("input-bound", "compute-bound", "balanced"):
        parts = []
        if x.get("stall_fraction") is not None:
            parts.append(f"the training loop waited for data {fmt_fraction(x['stall_fraction'])} of its step time")
            if x.get("steps") is not None:
                parts[-1] += f" over {fmt_count(x['steps'])} steps"
        if x.get("what_if_speedup") is not None:
            parts.append(f"with free data it would run {fmt_ratio(x['what_if_speedup'])} faster")
        return [_capital("; ".join(parts)) + "."] if parts else []
    if v.label in ("loader-limited", "near-optimal"):
        return [_cfg(x["best"]), f" delivers {fmt_rate(x['samples_per_s'])} samples/s, {fmt_ratio(x['speedup'])} the "
                "baseline ", _cfg(x["baseline"]), f" ({fmt_rate(x['baseline_samples_per_s'])} samples/s)."]
    if v.label == "measured":
        return [_cfg(x["best"]), f" was the fastest of {_n(x['configurations'], 'configuration')} measured, at "
                f"{fmt_rate(x['samples_per_s'])} samples/s."]
    if v.label == "stage-bound":
        return [f"{x['stage']} takes {fmt_ms(x['ms_per_sample'])} per sample, {fmt_fraction(x['share'])} of the "
                "measured per-sample time."]
    if v.label == "no errors":
        return [f"The checks found no errors ({_n(x['warnings'], 'warning')}, {_n(x['infos'], 'note')})."]
    return []


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


# -- benchmark ---------------------------------------------------------------------
def _bench_section(facts: an.ReportFacts, r: dict):
    bench = facts.bench
    if bench is None:
        return None, None
    if bench.measured == 0:
        rows = [[Code(row.label), row.error or DASH] for row in bench.rows]
        blocks = [Paragraph([f"All {_n(bench.failed, 'configuration')} failed:"]), Table(["Configuration", "error"], rows)]
        return Section("benchmark", "Benchmark", blocks), None
    intro = f"{_n(bench.measured, 'configuration')} measured"
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
        intro += f" {_n(bench.failed, 'configuration')} failed; see below the table."
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
        parts: list = ["Fastest: ", _cfg(best.label), f" at {fmt_rate(best.samples_per_s)} samples/s"]
        if best.speedup is not None:
            parts.append(f", {fmt_ratio(best.speedup)} the single-process loader")
        if best.efficiency is not None and an._workers(best.config) > 0:
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
            parts.append(f" The best uses {an._workers(best.config)} workers on {bench.cores} cores and beats one process "
                         f"by more than {bench.cores}×, so the source is latency-bound: extra workers overlap waiting, "
                         "not computation.")
        blocks.append(Paragraph(parts))
        headline = [f"Fastest of {_n(bench.measured, 'benchmarked configuration')}: ", _cfg(best.label), ", ",
                    f"{fmt_rate(best.samples_per_s)} samples/s"]
        if best.speedup is not None:
            headline.append(f" ({fmt_ratio(best.speedup)} the single-process loader)")
        headline.append(".")
    blocks.append(Figure("scaling", "Throughput against num_workers, with the ideal scaling line"))
    blocks.append(Figure("latency", "Distribution of steady-state batch waits"))
    return Section("benchmark", "Benchmark", blocks), headline


# -- tuning --------------------------------------------------------------------------
def _tuning_section(facts: an.ReportFacts, r: dict):
    tuning = facts.tuning
    if tuning is None:
        return None, None
    parts: list = [f"The tuner measured {_n(tuning.trials, 'trial')}"]
    if tuning.seconds is not None:
        parts.append(f" in {fmt_seconds(tuning.seconds)}")
    parts += [" and chose ", _cfg(tuning.best.label), f" at {fmt_rate(tuning.best.samples_per_s)} samples/s"]
    if tuning.baseline is not None and tuning.speedup is not None:
        parts += [f", {fmt_ratio(tuning.speedup)} the baseline ", _cfg(tuning.baseline.label),
                  f" ({fmt_rate(tuning.baseline.samples_per_s)} samples/s)"]
    if tuning.runner_up and tuning.margin is not None:
        parts += [f", {fmt_fraction(tuning.margin - 1.0)} faster than the runner-up ", _cfg(tuning.runner_up)]
    if tuning.confidence is not None:
        parts.append(f"; confidence: {fmt_value(tuning.confidence)}")
    parts.append(".")
    blocks: list = [Paragraph(parts)]
    if tuning.region:
        text = f"The tuner classified the source as {tuning.region}"
        blocks.append(Paragraph([text + (f": {tuning.region_reason}." if tuning.region_reason else ".")]))
    if tuning.top_trials:
        rows = [[t.phase or DASH, Code(t.label), fmt_rate(t.samples_per_s), fmt_ratio(t.vs_baseline)]
                for t in tuning.top_trials]
        blocks.append(Paragraph([f"The {_n(len(rows), 'fastest trial')}:"]))
        blocks.append(Table(["Phase", "Configuration", "samples/s", "vs baseline"], rows, "llrr"))
    # A failure the search notes already explain is not listed twice.
    failed = [(label, error) for label, error in tuning.failed_trials if not any(error in n for n in tuning.notes)]
    if failed:
        blocks.append(Paragraph([f"{_n(len(failed), 'trial')} failed:"]))
        blocks.append(Bullets([[Code(label), ": ", *record_text(error)] for label, error in failed]))
    if tuning.notes:
        blocks.append(Paragraph(["Search notes:"]))
        blocks.append(Bullets([record_text(note) for note in tuning.notes]))
    headline: list = ["Tuning"]
    if tuning.seconds is not None:
        headline.append(f" ({fmt_seconds(tuning.seconds)}, {_n(tuning.trials, 'trial')})")
    headline += [" chose ", _cfg(tuning.best.label), f": {fmt_rate(tuning.best.samples_per_s)} samples/s"]
    if tuning.baseline is not None and tuning.speedup is not None:
        headline += [f", {fmt_ratio(tuning.speedup)} the baseline ", _cfg(tuning.baseline.label)]
    headline.append(".")
    return Section("tuning", "Tuning", blocks), headline


# -- best configuration ----------------------------------------------------------------
def _best_section(facts: an.ReportFacts, r: dict):
    best = facts.best
    if best is None:
        return None, None
    where = "by the tuner" if best.source == "tune" else "in the benchmark sweep"
    parts: list = [_cfg(best.label), f" measured {fmt_rate(best.samples_per_s)} samples/s {where}"]
    if best.baseline is not None and best.speedup is not None:
        parts += [f", {fmt_ratio(best.speedup)} ", _cfg(best.baseline.label),
                  f" ({fmt_rate(best.baseline.samples_per_s)} samples/s)"]
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
    lines += [f"    {name}={value!r}," for name, value in an.loader_arguments(config)]
    lines.append(")")
    return "\n".join(lines)


# -- stages ---------------------------------------------------------------------------
def _stage_section(facts: an.ReportFacts, r: dict):
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
            text += f", inside {_n(run['num_workers'], 'worker')}" if run["num_workers"] else ", in the main process"
            if run.get("start_method") and run["num_workers"]:
                text += f" ({run['start_method']})"
            blocks.append(Paragraph([text + "."]))
        blocks.append(Paragraph([f"{_n(len(stages.rows), 'stage')} sum to {fmt_ms(stages.total_ms)} per sample; the "
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
        blocks.append(Paragraph([f"Top {_n(len(stages.hotspots), 'Python hot spot')} of ", Code("__getitem__"),
                                 " by cumulative time (cProfile):"]))
        rows = [[Code(h.function), h.location, fmt_count(h.calls), fmt_ms(h.total_ms), fmt_ms(h.cumulative_ms)]
                for h in stages.hotspots]
        blocks.append(Table(["Function", "where", "calls", "own time", "cumulative"], rows, "llrrr"))
    return Section("stages", "Stage breakdown", blocks), [p for p in headline if p] or None


# -- training loop ---------------------------------------------------------------------
def _training_section(facts: an.ReportFacts, r: dict):
    t = facts.training
    if t is None:
        return None, None
    blocks: list = []
    first: list = []
    if t.stall_fraction is not None:
        text = "The loop"
        if t.config_label:
            first += [text + " (loader ", _cfg(t.config_label), ")"]
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
                            [[_evidence_value(k, rank.get(k)) for k in keys] for rank in t.ranks], "l" * len(keys)))
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
    if isinstance(occupancy, dict) and an.number(occupancy.get("mean_ready")) is not None \
            and an.number(occupancy.get("capacity")):
        text = (f"Prefetch buffer: on average {fmt_value(occupancy['mean_ready'])} of "
                f"{fmt_value(occupancy['capacity'])} slots held a ready batch")
        empty, full = an.number(occupancy.get("empty_fraction")), an.number(occupancy.get("full_fraction"))
        if empty is not None and full is not None:
            text += f"; it was empty {fmt_fraction(empty)} and full {fmt_fraction(full)} of the time"
        return text + "."
    if isinstance(occupancy, dict) and occupancy:
        return "Prefetch-buffer occupancy (ready batches waiting): " + fmt_value(occupancy) + "."
    if an.number(occupancy) is not None:
        return f"Mean prefetch-buffer occupancy (ready batches waiting): {fmt_value(occupancy)}."
    return ""


def _distributed_text(d: dict) -> str:
    if d.get("slowest_rank") is None or an.number(d.get("max_data_wait_ms_per_step")) is None:
        return "Across ranks: " + fmt_value(d) + "."
    text = "Across "
    text += f"{d['world_size']} ranks" if isinstance(d.get("world_size"), int) else "the ranks"
    text += (f" the slowest, rank {d['slowest_rank']}, waited {fmt_ms(d['max_data_wait_ms_per_step'])} per step for "
             "data")
    if an.number(d.get("min_data_wait_ms_per_step")) is not None:
        text += f" against {fmt_ms(d['min_data_wait_ms_per_step'])} on the fastest"
    if an.number(d.get("max_stall_fraction")) is not None:
        text += f"; the job runs at its pace, a stall fraction of {fmt_fraction(d['max_stall_fraction'])}"
    return text + "."


# -- epoch -------------------------------------------------------------------------------
def _epoch_section(facts: an.ReportFacts, r: dict):
    epoch = facts.epoch
    if epoch is None:
        return None, None
    rows = []
    for row in epoch.rows:
        start = DASH
        if row.startup_s is not None:
            start = f"{fmt_seconds(row.startup_s)}" + (" once" if row.persistent else " per epoch")
        rows.append([Code(row.label), row.role, fmt_rate(row.samples_per_s), fmt_seconds(row.seconds),
                     fmt_count(row.batches), start])
    blocks: list = [
        Paragraph([f"For an epoch of {fmt_count(epoch.length)} samples (the dataset's length) at the measured "
                   "steady-state rates:"]),
        Table(["Configuration", "role", "samples/s", "epoch time", "batches", "worker start-up"], rows, "llrrrr"),
    ]
    best = epoch.rows[0]
    notes: list = []
    if epoch.saving_s is not None and len(epoch.rows) > 1:
        notes += [_cfg(best.label), f" saves about {fmt_seconds(epoch.saving_s)} per epoch against ",
                  _cfg(epoch.rows[1].label), "."]
    if best.startup_s is not None and not best.persistent and best.seconds > 0:
        notes.append(f" Without persistent_workers each epoch also pays {fmt_seconds(best.startup_s)} of worker "
                     f"start-up ({fmt_fraction(best.startup_s / best.seconds)} of the epoch).")
    if notes:
        blocks.append(Paragraph(notes))
    headline: list = [f"One epoch of {fmt_count(epoch.length)} samples takes about {fmt_seconds(best.seconds)} with ",
                      _cfg(best.label)]
    if len(epoch.rows) > 1:
        headline += [f" against {fmt_seconds(epoch.rows[1].seconds)} with ", _cfg(epoch.rows[1].label)]
    headline.append(".")
    return Section("epoch", "Estimated epoch time", blocks), headline


# -- memory -------------------------------------------------------------------------------
def _memory_section(facts: an.ReportFacts, r: dict):
    memory = facts.memory
    if memory is None:
        return None, None
    blocks: list = []
    ref = f"One collated batch measured {fmt_bytes(memory.reference_batch_bytes)}"
    if memory.reference_batch_size:
        ref += f" at batch size {memory.reference_batch_size}"
    blocks.append(Paragraph([ref + "."]))
    for row in memory.rows:
        parts: list = ["At ", _cfg(row.label), f", {row.workers} workers × prefetch_factor {row.prefetch_factor} = "
                       f"{row.in_flight_batches} batches of {fmt_bytes(row.batch_bytes)} are in flight: "
                       f"{fmt_bytes(row.in_flight_bytes)}"]
        if row.shm_fraction is not None:
            parts.append(f", {fmt_fraction(row.shm_fraction)} of the {fmt_bytes(memory.shm_free_bytes)} free in "
                         "/dev/shm")
        parts.append(".")
        if row.workers_rss_bytes is not None:
            parts.append(f" With the workers' {fmt_bytes(row.workers_rss_bytes)} resident memory that is "
                         f"{fmt_bytes(row.ram_needed_bytes)}")
            if row.ram_fraction is not None:
                parts.append(f", {fmt_fraction(row.ram_fraction)} of the {fmt_bytes(memory.ram_available_bytes)} "
                             "of RAM available")
            parts.append(".")
        blocks.append(Paragraph(parts))
    rows = [[Code(row.label), row.role, f"{row.workers} × {row.prefetch_factor}", fmt_bytes(row.batch_bytes),
             fmt_bytes(row.in_flight_bytes), fmt_fraction(row.shm_fraction), fmt_bytes(row.workers_rss_bytes),
             fmt_fraction(row.ram_fraction)] for row in memory.rows]
    blocks.append(Table(["Configuration", "role", "workers × prefetch", "batch", "in flight", "of free /dev/shm",
                         "workers RSS", "of available RAM"], rows, "llrrrrrr"))
    first = memory.rows[0]
    headline: list = ["In-flight batches at ", _cfg(first.label), f": {fmt_bytes(first.in_flight_bytes)}"]
    if first.shm_fraction is not None:
        headline.append(f", {fmt_fraction(first.shm_fraction)} of free /dev/shm")
    headline.append(".")
    return Section("memory", "Memory budget of in-flight batches", blocks), headline


# -- CPU -------------------------------------------------------------------------------------
def _cpu_section(facts: an.ReportFacts, r: dict):
    cpu = facts.cpu
    if cpu is None:
        return None, None
    f = cpu.focus
    where: list = ["In the training loop" if f.label == "training loop" else "At ", *([] if f.label == "training loop"
                                                                                     else [_cfg(f.label)])]
    text = f" the main process used {fmt_percent(f.main_percent)} of a core"
    if f.workers:
        text += f" and the {f.workers} workers {fmt_percent(f.workers_percent)} together"
        text += f": {fmt_percent(f.total_percent)} of one core in all"
    if f.capacity_fraction is not None:
        text += f", {fmt_fraction(f.capacity_fraction)} of the {cpu.cores} usable cores"
    blocks: list = [Paragraph([*where, text + "."])]
    rows = [[row.label if row.label == "training loop" else Code(row.label), fmt_percent(row.main_percent), fmt_percent(row.workers_percent),
             fmt_fraction(row.capacity_fraction), fmt_mib(row.main_rss_mb), fmt_mib(row.workers_rss_mb),
             fmt_mib(row.worker_uss_mb)] for row in cpu.rows]
    blocks.append(Table(["Configuration", "main CPU", "workers CPU", "of usable cores", "main RSS", "workers RSS",
                         "worker USS"], rows, "lrrrrrr"))
    headline = None
    if f.capacity_fraction is not None:
        headline = ["CPU: ", *([] if f.label == "training loop" else [_cfg(f.label), " keeps "]),
                    f"{fmt_fraction(f.capacity_fraction)} of the {cpu.cores} usable cores busy."]
    return Section("cpu", "CPU use", blocks), headline


# -- checklist ---------------------------------------------------------------------------------
def _target_text(row: an.CheckRow) -> str:
    sign = "≥" if row.target.higher_is_better else "≤"
    return f"{sign} {fmt_quantity(row.target.good, row.unit)}"


def _checklist_section(facts: an.ReportFacts, r: dict):
    if not facts.checklist:
        return None, None
    rows = [[row.name, Code(row.subject) if row.subject else DASH, fmt_quantity(row.measured, row.unit),
             _target_text(row), Status(row.status)] for row in facts.checklist]
    table = Table(["Check", "measured at", "measured", "target", "status"], rows, "llrrl")
    return Section("checklist", "Checklist", [table]), None


# -- findings ------------------------------------------------------------------------------------
def _findings_section(facts: an.ReportFacts, r: dict):
    found = facts.findings
    if found is None:
        return None, None
    c = found.counts
    summary = (f"{_n(len(found.findings), 'finding')}: {_n(c['error'], 'error')}, {_n(c['warning'], 'warning')}, "
               f"{_n(c['info'], 'note')}.")
    blocks: list = [Paragraph([summary])]
    coverage = r.get("coverage")
    if isinstance(coverage, dict) and coverage:
        blocks.append(Paragraph(["Coverage: " + "; ".join(f"{k.replace('_', ' ')}: {fmt_value(v)}"
                                                          for k, v in coverage.items()) + "."]))
    if found.findings:
        rows = [[Status({"error": "fail", "warning": "warn"}.get(f.severity, "info")), Code(f.code), record_text(f.message)]
                for f in found.findings]
        blocks.append(Table(["Severity", "Code", "Finding"], rows, "lll"))
    codes = sorted({f.code for f in found.findings if f.severity in ("error", "warning")})
    headline = [f"Checks: {_n(c['error'], 'error')}, {_n(c['warning'], 'warning')}, {_n(c['info'], 'note')}"
                + (f" ({', '.join(codes)})" if codes else "") + "."]
    return Section("findings", "Check findings", blocks), headline


# -- recommendations --------------------------------------------------------------------------------
def _recommendations_section(facts: an.ReportFacts, r: dict):
    if not facts.recommendations:
        return None, None
    items = [_recommendation_item(rec) for rec in facts.recommendations]
    items = [i for i in items if i]
    if not items:
        return None, None
    return Section("recommendations", "Recommendations", [Bullets(items)]), None


def _recommendation_item(rec: an.Recommendation) -> list:
    if rec.source == "record":
        parts: list = [Strong(fmt_value(rec.title or rec.id).replace("`", ""))]
        if rec.detail:
            parts += [" — ", *record_text(fmt_value(rec.detail))]
        if rec.measured is not None:
            parts += [" Measured: ", *record_text(fmt_value(rec.measured)), "."]
        if rec.expected_gain is not None:
            gain = rec.expected_gain
            parts.append(f" Expected gain: {fmt_ratio(gain) if isinstance(gain, float) else fmt_value(gain)}.")
        return parts
    x = rec.values
    if rec.id == "use-best-config":
        return [Strong("Switch to"), " ", Code(x["label"]),
                f" — measured {fmt_rate(x['samples_per_s'])} samples/s against "
                f"{fmt_rate(x['baseline_samples_per_s'])} for ", Code(x["baseline"]),
                f". Expected gain: {fmt_ratio(x['speedup'])} loader throughput."]
    if rec.id == "persistent-workers":
        return [Strong("Set persistent_workers=True"), " — at ", Code(x["label"]),
                f" worker start-up took {fmt_seconds(x['startup_s'])}, {fmt_fraction(x['fraction'])} of a "
                f"{fmt_seconds(x['epoch_s'])} epoch. Expected gain: {fmt_seconds(x['startup_s'])} per epoch "
                "after the first."]
    return []


# -- troubleshooting -----------------------------------------------------------------------------------
_STACK_KEYS = ("stack", "traceback", "where")


def _troubleshooting_section(facts: an.ReportFacts, r: dict):
    found = facts.findings
    if found is None or not found.findings:
        return None, None
    section = Section("troubleshooting", "Troubleshooting")
    for f in found.findings:
        blocks: list = []
        if f.message:
            blocks.append(Paragraph(record_text(f.message)))
        evidence, stacks = [], []
        for key, value in f.evidence.items():
            if value is None or value == [] or value == {}:
                continue
            if key in _STACK_KEYS and (isinstance(value, list) or (isinstance(value, str) and "\n" in value)):
                stacks.append("\n".join(map(_stack_line, value)) if isinstance(value, list) else value)
            else:
                evidence.append([f"{key.replace('_', ' ')}: ", _evidence_value(key, value)])
        if evidence:
            blocks.append(Bullets(evidence))
        blocks += [CodeBlock(s) for s in stacks]
        derived = _derived_text(f)
        if derived:
            blocks.append(Paragraph(derived))
        if f.fix:
            blocks.append(Paragraph([Strong("Fix:"), " ", *record_text(f.fix)]))
        section.subsections.append(Section(f"finding-{f.code}", f"{f.code} ({f.severity})", blocks))
    return section, None


def _stack_line(frame: Any) -> str:
    """A stack frame as ``file:line in function`` (frames come as dicts or strings)."""
    if isinstance(frame, dict) and frame.get("file"):
        text = f"{frame['file']}:{frame.get('line', '?')}"
        return text + (f" in {frame['function']}" if frame.get("function") else "")
    return str(frame)


def _evidence_value(key: str, value: Any) -> str:
    """Evidence by the unit its key names: *_bytes, *_mb, *_ms, *_s; indices and pids as plain integers."""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_evidence_value(str(k), v)}" for k, v in value.items())
    if isinstance(value, list) and value and all(an.number(v) is not None or isinstance(v, dict) for v in value):
        return ", ".join(_evidence_value(key, v) for v in value)
    if an.number(value) is None:
        return fmt_value(value)
    if "per_1000" in key:  # a rate (MB per thousand samples), not an amount
        return fmt_value(value)
    if isinstance(value, int) and (key in ("index", "indices", "pid") or key.endswith(("_index", "_pid"))):
        return str(value)
    if key.endswith("bytes"):
        return fmt_bytes(value)
    if key.endswith("_mb") or "_mb_" in key:  # MiB, as the resource sampler and the checks report it
        return fmt_mib(value)
    if key == "ms" or key.endswith("_ms") or "_ms_" in key:
        return fmt_ms(value)
    if key.endswith("fraction"):
        return fmt_fraction(value)
    if key.endswith("_s") or key.endswith("seconds"):
        return fmt_seconds(value)
    return fmt_value(value)


def _derived_text(f: an.FindingView) -> list:
    d = f.derived
    if f.code == "memory-growth" and "epoch_mb_per_worker" in d:
        text = (f"At {fmt_value(d['mb_per_1000'])} MB per thousand samples, one epoch of "
                f"{fmt_count(d['epoch_samples'])} samples adds about {fmt_value(d['epoch_mb_per_worker'])} MB per "
                "worker")
        parts: list = [text]
        if "epoch_mb_all_workers" in d:
            parts.append(f", {fmt_value(d['epoch_mb_all_workers'])} MB across {int(d['workers'])} workers")
        parts.append(".")
        return parts
    if f.code == "slow-samples" and "slowest_s" in d:
        parts = [f"The slowest sample, index {int(d['slowest_index'])}, took {fmt_seconds(d['slowest_s'])}"]
        if "median_s" in d:
            parts.append(f", {fmt_ratio(d['slowest_s'] / d['median_s'])} the median sample "
                         f"({fmt_seconds(d['median_s'])})")
        return [*parts, "."]
    if f.code == "oversubscription" and "threads" in d:
        return [f"{int(d['num_workers'])} workers × {int(d['threads_per_worker'])} threads each = "
                f"{int(d['threads'])} threads for {int(d['cores'])} usable cores, {fmt_ratio(d['threads'] / d['cores'])} "
                "oversubscribed."]
    if f.code == "shm-too-small" and "in_flight_bytes" in d:
        return [f"The largest in-flight set measured is {int(d['in_flight_batches'])} batches, "
                f"{fmt_bytes(d['in_flight_bytes'])}, against {fmt_bytes(d['shm_free_bytes'])} free in /dev/shm."]
    return []
