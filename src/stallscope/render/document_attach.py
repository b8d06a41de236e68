"""The Markdown/HTML sections of an ``attach`` record (facts from ``analysis/attach.py``)."""

from __future__ import annotations

from typing import Any

from ..analysis.attach import AttachFacts, attach_facts
from . import document_model as dm
from . import report_format as rf


def attach_sections(r: dict[str, Any]) -> list[dm.Section]:
    """The attach sections, or none for a record without an attach capture."""
    facts = attach_facts(r)
    if facts is None:
        return []
    sections = [_training_section(facts)]
    if facts.workers or facts.stages:
        sections.append(_workers_section(facts))
    if facts.stuck:
        sections.append(_stuck_section(facts))
    return sections


def _training_section(facts: AttachFacts) -> dm.Section:
    blocks: list[dm.Block] = []
    sampled = (
        f"Process {facts.pid} was sampled from outside for {rf.fmt_seconds(facts.duration_s)} at "
        f"{rf.fmt_fixed(facts.rate_hz, 0)} Hz"
        + (f" ({facts.sampler})" if facts.sampler else "")
        + ", without pausing it."
    )
    if facts.data_wait_fraction is not None and facts.interval is not None:
        low, high = facts.interval
        waited = rf.fmt_fraction(facts.data_wait_fraction)
        sampled += (
            f" Its training thread was waiting for data in {waited}"
            f" of {rf.fmt_count(facts.samples)} samples (95% interval {rf.fmt_fraction(low)} to "
            f"{rf.fmt_fraction(high)}, treating the samples as independent)."
        )
    if facts.sampler_errors:
        sampled += (
            f" py-spy could not read {rf.fmt_count(facts.sampler_errors)} samples (a stack read "
            "while it changed); they are left out."
        )
    blocks.append(dm.Paragraph([sampled]))
    blocks.append(training_table(facts))
    if len(facts.ranks) > 1:
        blocks.append(ranks_table(facts))
    return dm.Section("attach", "Attached: the training thread", blocks)


def training_table(facts: AttachFacts) -> dm.Table:
    """Where the training thread's samples fell, and each place's share."""
    rows = [
        [category, rf.fmt_count(n), rf.fmt_fraction(n / facts.samples if facts.samples else None)]
        for category, n in facts.counts.items()
    ]
    return dm.Table(["where the samples fell", "samples", "share"], rows, "lrr")


def ranks_table(facts: AttachFacts) -> dm.Table:
    """Each rank's training process and how long it waited for data, the slowest marked."""
    return dm.Table(
        ["rank", "pid", "samples", "data wait", "verdict"],
        [
            [
                "?" if rank.rank is None else str(rank.rank),
                str(rank.pid),
                rf.fmt_count(rank.samples),
                rf.fmt_fraction(rank.data_wait_fraction),
                (rank.verdict or "–") + (" (slowest)" if rank is facts.slowest_rank else ""),
            ]
            for rank in facts.ranks
        ],
        "rrrrl",
    )


def worker_stages_table(facts: AttachFacts) -> dm.Table:
    """The workers' busy samples by stage, with the worker time they stand for."""
    return dm.Table(
        ["stage", "kind", "samples", "share", "worker time"],
        [
            [
                dm.Code(s.name),
                s.kind,
                rf.fmt_count(s.samples),
                rf.fmt_fraction(s.share),
                rf.fmt_seconds(s.seconds),
            ]
            for s in facts.stages
        ],
        "llrrr",
    )


def _workers_section(facts: AttachFacts) -> dm.Section:
    blocks: list[dm.Block] = []
    if facts.workers:
        blocks.append(
            dm.Table(
                ["worker", "of process", "kind", "samples", "busy", "top function", "uneven"],
                [
                    [
                        str(w.pid),
                        str(w.trainer or "?"),
                        w.kind,
                        rf.fmt_count(w.samples),
                        rf.fmt_fraction(w.busy_fraction),
                        dm.Code(w.top_function) if w.top_function else "–",
                        "yes" if w.uneven else "",
                    ]
                    for w in facts.workers
                ],
                "lllrrll",
            )
        )
    if facts.stages:
        blocks.append(
            dm.Paragraph(
                [
                    "The workers' busy samples, folded into the stages ",
                    dm.Code("stallscope stages"),
                    " names (or the transform or user function they fell in):",
                ]
            )
        )
        blocks.append(worker_stages_table(facts))
    if facts.top_functions:
        blocks.append(
            dm.Bullets(
                [
                    [dm.Code(f.name), f" {rf.fmt_fraction(f.share)} of the busy samples"]
                    for f in facts.top_functions[:5]
                ]
            )
        )
    for w in facts.uneven:
        blocks.append(
            dm.Paragraph(
                [
                    dm.Strong("Uneven worker: "),
                    f"{w.pid} was busy {rf.fmt_fraction(w.busy_fraction)} of the time, far from "
                    "the other workers (an uneven shard or slow samples).",
                ]
            )
        )
    return dm.Section(
        "attach-workers", "Attached: where the loader's workers spend their time", blocks
    )


def _stuck_section(facts: AttachFacts) -> dm.Section:
    blocks: list[dm.Block] = []
    for stuck in facts.stuck:
        still = ", still there when sampling ended" if stuck.ongoing else ""
        blocks.append(
            dm.Paragraph(
                [
                    dm.Strong("Stuck: "),
                    f"{stuck.role} {stuck.pid} ({stuck.thread}) stayed in one stack for "
                    f"{rf.fmt_seconds(stuck.seconds)}{still} (at least "
                    f"{rf.fmt_seconds(facts.hang_after_s)} counts as stuck):",
                ]
            )
        )
        blocks.append(dm.CodeBlock("\n".join(stuck.stack)))
    return dm.Section("attach-stuck", "Attached: stuck threads", blocks)
