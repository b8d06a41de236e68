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
    counts = facts.counts
    columns: list[dm.Column[str]] = [
        dm.Column("where the samples fell", lambda place: place),
        dm.Column("samples", lambda place: rf.fmt_count(counts[place]), "r"),
        dm.Column(
            "share",
            lambda place: rf.fmt_fraction(counts[place] / facts.samples if facts.samples else None),
            "r",
        ),
    ]
    return dm.table(counts, columns)


def ranks_table(facts: AttachFacts) -> dm.Table:
    """Each rank's training process and how long it waited for data, the slowest marked."""
    return dm.table(
        facts.ranks,
        [
            dm.Column("rank", lambda rank: "?" if rank.rank is None else str(rank.rank), "r"),
            dm.Column("pid", lambda rank: str(rank.pid), "r"),
            dm.Column("samples", lambda rank: rf.fmt_count(rank.samples), "r"),
            dm.Column("data wait", lambda rank: rf.fmt_fraction(rank.data_wait_fraction), "r"),
            dm.Column(
                "verdict",
                lambda rank: (
                    (rank.verdict or "–") + (" (slowest)" if rank is facts.slowest_rank else "")
                ),
            ),
        ],
    )


def worker_stages_table(facts: AttachFacts) -> dm.Table:
    """The workers' busy samples by stage, with the worker time they stand for."""
    return dm.table(
        facts.stages,
        [
            dm.Column("stage", lambda s: dm.Code(s.name)),
            dm.Column("kind", lambda s: s.kind),
            dm.Column("samples", lambda s: rf.fmt_count(s.samples), "r"),
            dm.Column("share", lambda s: rf.fmt_fraction(s.share), "r"),
            dm.Column("worker time", lambda s: rf.fmt_seconds(s.seconds), "r"),
        ],
    )


def _workers_section(facts: AttachFacts) -> dm.Section:
    blocks: list[dm.Block] = []
    if facts.workers:
        blocks.append(
            dm.table(
                facts.workers,
                [
                    dm.Column("worker", lambda w: str(w.pid)),
                    dm.Column("of process", lambda w: str(w.trainer or "?")),
                    dm.Column("kind", lambda w: w.kind),
                    dm.Column("samples", lambda w: rf.fmt_count(w.samples), "r"),
                    dm.Column("busy", lambda w: rf.fmt_fraction(w.busy_fraction), "r"),
                    dm.Column(
                        "top function", lambda w: dm.Code(w.top_function) if w.top_function else "–"
                    ),
                    dm.Column("uneven", lambda w: "yes" if w.uneven else ""),
                ],
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
