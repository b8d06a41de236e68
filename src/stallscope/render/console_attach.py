"""Console summary of an ``attach`` record: the training thread's data wait, the workers' stage
table, stuck threads, uneven workers and ranks (facts from ``analysis/attach.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..analysis.attach import AttachFacts, attach_facts
from ..analysis.readers import as_record_dict
from ..analysis.training import thresholds
from . import report_format as rf
from .console_table import document_table, titled_table
from .document_attach import ranks_table, training_table, worker_stages_table

_VERDICT_STYLE = {
    "input-bound": "bold red",
    "balanced": "bold yellow",
    "compute-bound": "bold green",
}


def headline(facts: AttachFacts) -> str:
    """One line: what was sampled and how long the training thread waited for data."""
    where = f"process {facts.pid}"
    if len(facts.ranks) > 1:
        where += f" ({len(facts.ranks)} ranks)"
    sampled = (
        f"{where} sampled for {rf.fmt_seconds(facts.duration_s)} at "
        f"{rf.fmt_fixed(facts.rate_hz, 0)} Hz"
    )
    if facts.data_wait_fraction is None:
        return sampled + ": no training thread was sampled."
    low, high = facts.interval or (None, None)
    waited = rf.fmt_fraction(facts.data_wait_fraction)
    return (
        f"{sampled}: the training thread waited for data {waited}"
        f" of {rf.fmt_count(facts.samples)} samples ({rf.fmt_fraction(low)}–"
        f"{rf.fmt_fraction(high)} at 95%)"
    )


def render_attach(record: Mapping[str, Any], console: Console) -> None:
    facts = attach_facts(as_record_dict(dict(record)))
    if facts is None:
        return
    verdict = facts.verdict or "no verdict"
    style = _VERDICT_STYLE.get(verdict, "bold")
    console.print(f"[{style}]{verdict}[/]: {escape(headline(facts))}", highlight=False)
    limits = thresholds()
    console.print(
        f"  thresholds: input-bound >= {limits['input_bound_at'] * 100:.0f}%, compute-bound < "
        f"{limits['compute_bound_below'] * 100:.0f}% (the profile command's)",
        highlight=False,
    )
    console.print(document_table(training_table(facts), "Training thread"))
    if len(facts.ranks) > 1:
        console.print(document_table(ranks_table(facts), "Ranks"))
    if facts.sampler_errors:
        console.print(
            f"  py-spy could not read {facts.sampler_errors} samples (left out)", highlight=False
        )
    if facts.workers:
        ranked = len(facts.ranks) > 1
        of = ["of"] if ranked else []
        workers = titled_table(
            "Loader workers",
            ["pid", *of, "kind", "samples", "busy", "top function", ""],
            "l" * len(of) + "llrrll",
        )
        for w in facts.workers:
            workers.add_row(
                str(w.pid),
                *((str(w.trainer or "?"),) if ranked else ()),
                w.kind,
                rf.fmt_count(w.samples),
                rf.fmt_fraction(w.busy_fraction),
                escape(w.top_function or "–"),
                "[yellow]uneven[/]" if w.uneven else "",
            )
        console.print(workers)
    if facts.stages:
        stages = worker_stages_table(facts)
        console.print(document_table(stages, "Where the workers' busy time goes"))
    if facts.top_functions:
        functions = ", ".join(
            f"{f.name} {rf.fmt_fraction(f.share)}" for f in facts.top_functions[:5]
        )
        console.print(f"  top user functions in the workers: {escape(functions)}", highlight=False)
    for w in facts.uneven:
        console.print(
            f"[yellow]uneven worker:[/] {w.pid} was busy {rf.fmt_fraction(w.busy_fraction)} of "
            "the time, far from the other workers (an uneven shard or slow samples).",
            highlight=False,
        )
    for stuck in facts.stuck:
        still = ", still there when sampling ended" if stuck.ongoing else ""
        console.print(
            f"[bold red]stuck:[/] {stuck.role} {stuck.pid} ({escape(stuck.thread)}) stayed in one "
            f"stack for {rf.fmt_seconds(stuck.seconds)}{still}:",
            highlight=False,
        )
        for line in stuck.stack:
            console.print(f"    {escape(line)}", highlight=False)
