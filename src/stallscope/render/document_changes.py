"""The report's "Code changes, applied and measured" section: each change stallscope applied inside
its probes, its speed-up over the knob config it raced with the rounds behind it, its measured side
effect and the diff (shown only where the patched code ran for two batches)."""

from __future__ import annotations

from typing import Any

from ..analysis.code_changes import CodeChangeFacts, CodeChangeRow
from ..text import plural
from . import document_model as dm
from . import report_format as rf


def code_changes_section(
    facts: CodeChangeFacts, r: dict[str, Any]
) -> tuple[dm.Section | None, dm.Text | None]:
    blocks: list[dm.Block] = []
    if facts.pick_label and facts.rounds > 0:  # a run that raced no change has no race to say
        text = (
            "Each change was applied inside stallscope's probes (your files were not touched) and "
            "raced against the knob config "
        )
        blocks.append(
            dm.Paragraph(
                [
                    text,
                    dm.config_code(facts.pick_label),
                    f", on the same {rf.fmt_count(facts.items)} items in "
                    f"{plural(facts.rounds, 'interleaved round')}.",
                ]
            )
        )
    if facts.rows:
        blocks.append(
            dm.table(
                facts.rows,
                [
                    dm.Column("Change", lambda row: row.title),
                    dm.Column("vs that config", _speedup, "r"),
                    dm.Column("rounds", lambda row: str(row.rounds), "r"),
                    dm.Column("samples/s", lambda row: rf.fmt_rate(row.samples_per_s), "r"),
                    dm.Column(
                        "alters samples",
                        lambda row: (
                            "yes"
                            if row.alters_output
                            else ("no" if row.alters_output is False else rf.DASH)
                        ),
                    ),
                ],
            )
        )
    for note in facts.notes:
        blocks.append(dm.Paragraph([dm.capital(note) + "."]))
    subsections = [_change(row, n) for n, row in enumerate(facts.rows)]
    if facts.not_applied:
        blocks.append(
            dm.Bullets(
                [[dm.Strong(title), f": not applied, {why}."] for title, why in facts.not_applied]
            )
        )
    headline: dm.Text | None = None
    best = facts.best
    if best is not None:
        headline = [
            f"Code change: {best.title.lower()} measured {rf.fmt_ratio(best.speedup)} the best "
            f"knob config over {plural(best.rounds, 'round')}"
            + (" (alters what the model sees)" if best.alters_output else "")
            + "."
        ]
    section = dm.Section("code-changes", "Code changes, applied and measured", blocks, subsections)
    return section, headline


def _speedup(row: CodeChangeRow) -> str:
    if row.error:
        return "failed"
    return rf.fmt_ratio(row.speedup) if row.speedup is not None else rf.DASH


def _change(row: CodeChangeRow, n: int) -> dm.Section:
    blocks: list[dm.Block] = []
    if row.error:
        blocks.append(dm.Paragraph([f"The race failed: {row.error}."]))
    elif row.speedup is not None:
        blocks.append(
            dm.Paragraph(
                [
                    f"{rf.fmt_ratio(row.speedup)} the knob config it raced "
                    f"({rf.fmt_rate(row.samples_per_s)} vs {rf.fmt_rate(row.pick_samples_per_s)} "
                    f"samples/s, median of {plural(row.rounds, 'interleaved round')})."
                ]
            )
        )
    lead = (
        dm.Strong("Alters what the model sees:") if row.alters_output else dm.Strong("Side effect:")
    )
    blocks.append(dm.Paragraph([lead, " ", dm.capital(row.side_effect) + "."]))
    if row.diff:
        blocks.append(dm.Paragraph(["The change, run for two batches before it is shown here:"]))
        blocks.append(dm.CodeBlock(row.diff, "diff"))
        if row.apply:
            blocks.append(
                dm.Paragraph(["Saved as change.diff, it applies with ", dm.Code(row.apply), "."])
            )
    else:
        text = row.description
        if row.unverified_reason:
            text += f" (no diff shown: {row.unverified_reason})"
        blocks.append(dm.Paragraph([text]))
    return dm.Section(f"code-change-{row.id}-{n}", row.title, blocks)
