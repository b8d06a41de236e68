"""Console summary of a compare record: the verdict, the CI gate, both sides' figures and stage
tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from .console_table import document_table, plain
from .document_compare import (
    figures_table,
    gate_sentence,
    settings_sentence,
    stage_table,
    stop_sentence,
    verdict_sentence,
)

_STYLES = {
    "slower": "bold red",
    "faster": "bold green",
    "within noise": "bold",
    "undecided": "bold yellow",
}


def render_compare(data: dict[str, Any], console: Console) -> None:
    figures = figures_table(data)
    if figures is not None:
        console.print(
            document_table(
                figures,
                "B against A (paired rounds; spread = (max - min) / median of a side's windows)",
            )
        )
    stages, error = stage_table(data)
    if stages is not None:
        console.print(
            document_table(stages, "Stages of A and B (ms per sample, largest change first)")
        )
    elif error:
        console.print(f"[yellow]{escape(error)}[/]")
    for sentence in (settings_sentence(data), stop_sentence(data)):
        if sentence:
            console.print(plain(sentence))
    style = _STYLES.get(str(data.get("verdict")), "bold")
    console.print(f"[{style}]{plain(verdict_sentence(data))}[/]")
    gate = gate_sentence(data)
    if gate:
        failed = (data.get("gate") or {}).get("failed")
        console.print(f"[{'bold red' if failed else 'green'}]{plain(gate)}[/]")
