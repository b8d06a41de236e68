"""Console lines of the ceiling, the cores needed and the free-data step (analysis/ceiling.py)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from ..analysis.ceiling import ceiling_facts


def render_ceiling(data: dict[str, Any], console: Console) -> None:
    facts = ceiling_facts(data)
    if facts is None:
        return
    if facts.ceiling_sentence:
        console.print(f"[bold]Ceiling:[/] {escape(facts.ceiling_sentence)}")
    if facts.cores_sentence:
        console.print(f"[bold]Cores needed:[/] {escape(facts.cores_sentence)}")
    if facts.free_data_sentence:
        console.print(f"[bold]Free data:[/] {escape(facts.free_data_sentence)}")
