"""The report's advice on the console: the same analysed recommendations, in the same sentences, as
the Markdown and HTML reports (``document_checks.recommendation_parts``), so that no surface of one
run can recommend what another does not."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from ..analysis import recommendations
from . import document_model as dm
from .document_checks import recommendation_parts


class _RichInline(dm.DocumentWriter):
    """Inline document parts as rich console markup."""

    def text(self, text: Any) -> str:
        return escape(str(text))

    def code(self, text: str) -> str:
        return f"[cyan]{escape(text)}[/]"

    def strong(self, text: str) -> str:
        return f"[bold]{escape(text)}[/]"

    def status(self, value: str) -> str:
        return escape(value)


def inline_markup(parts: list[Any]) -> str:
    """Document inline parts (text, code, strong) as one line of rich markup."""
    return _RichInline().inline(parts)


def render_recommendations(data: dict[str, Any], console: Console, *, bullet: str = "•") -> None:
    """Every recommendation ``analysis.recommendations`` gives for this record, one line each."""
    for rec in recommendations(data):
        parts = recommendation_parts(rec)
        if parts:
            console.print(f"{bullet} " + inline_markup(parts))


def print_blocks(blocks: list[Any], console: Console) -> None:
    """Document blocks (paragraphs, bullets, code) on the console, in the reports' words."""
    for block in blocks:
        if isinstance(block, dm.Paragraph):
            console.print(inline_markup(block.parts))
        elif isinstance(block, dm.Bullets):
            for item in block.items:
                console.print("• " + inline_markup(item))
        elif isinstance(block, dm.CodeBlock):
            console.print(escape(block.text))


def render_verdict(data: dict[str, Any], console: Console) -> None:
    """The run's one verdict (NOTE [one verdict] in analysis/run_verdict.py), under a rule: printed
    first, the evidence after it."""
    from .document_verdict import verdict_blocks

    blocks = verdict_blocks(data)
    if not blocks:
        return
    console.rule("[bold]Verdict")
    print_blocks(blocks, console)
    console.rule("[dim]Evidence", style="dim")
