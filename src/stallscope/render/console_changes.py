"""Console section of the code-change step: each change's speed-up over the knob config it raced,
its rounds, its side effect, and the diff."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..analysis.code_changes import code_change_facts
from .report_format import fmt_ratio


def render_code_changes(data: dict[str, Any], console: Console) -> None:
    facts = code_change_facts(data)
    if facts is None:
        return
    table = Table(
        title="Code changes, applied and raced against the knob config"
        + (f" ({facts.pick_label})" if facts.pick_label else ""),
        title_justify="left",
    )
    table.add_column("change")
    table.add_column("vs that config", justify="right")
    table.add_column("rounds", justify="right")
    table.add_column("side effect")
    for row in facts.rows:
        ratio = (
            "failed" if row.error else (fmt_ratio(row.speedup) if row.speedup is not None else "–")
        )
        table.add_row(
            escape(row.title),
            ratio,
            str(row.rounds),
            escape(row.side_effect),
            style="bold green" if row is facts.best else None,
        )
    if facts.rows:
        console.print(table)
    for note in facts.notes:
        console.print(f"[dim]{escape(note)}[/]")
    for row in facts.rows:
        if row.diff and row.worth_it:
            console.print(
                f"[bold]{escape(row.title)}[/] ({fmt_ratio(row.speedup)}), run for two batches "
                "first:"
            )
            console.print(row.diff, markup=False, highlight=False)
            if row.apply:
                console.print(f"[dim]saved as change.diff, it applies with: {escape(row.apply)}[/]")
        elif row.worth_it:
            reason = f" (no diff: {row.unverified_reason})" if row.unverified_reason else ""
            console.print(f"[bold]{escape(row.title)}[/]: {escape(row.description + reason)}")
    for title, why in facts.not_applied:
        console.print(f"[yellow]not applied: {escape(title)}[/] — {escape(why)}.")
