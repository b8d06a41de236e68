"""Console summary of a check record: findings (errors first) with evidence and fix, then
coverage."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..record.model import findings_of
from ..text import plural

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_MARK = {"error": "✖", "warning": "!", "info": "i"}
_EVIDENCE_CHARS = 400


def _short(value: Any) -> str | None:
    """A compact rendering of one evidence value, or None when it is too bulky to show inline."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (str, int, bool)) or value is None:
        return str(value)
    if (
        isinstance(value, list)
        and len(value) <= 8
        and all(isinstance(v, (str, int, float, bool)) for v in value)
    ):
        return "[" + ", ".join(_short(v) or "" for v in value) + "]"
    if (
        isinstance(value, dict)
        and len(value) <= 6
        and all(isinstance(v, (str, int, float, bool)) or v is None for v in value.values())
    ):
        return json.dumps(value)
    return None


def evidence_line(evidence: dict[str, Any]) -> str:
    parts = []
    for key, value in evidence.items():
        if value is None or value == [] or value == {}:
            continue
        text = _short(value)
        if text is not None:
            parts.append(f"{key}={text}")
    line = " · ".join(parts)
    return line if len(line) <= _EVIDENCE_CHARS else line[: _EVIDENCE_CHARS - 1] + "…"


def _coverage_line(coverage: dict[str, Any]) -> str:
    parts = []
    checked = coverage.get("indices_checked")
    length = coverage.get("dataset_length")
    if checked is not None:
        if length:
            fraction = coverage.get("fraction_checked") or 0.0
            parts.append(
                f"fetched {checked:,} of {length:,} samples ({fraction:.1%}, "
                f"{coverage.get('mode')}"
                f"{'' if coverage.get('mode') == 'full' else '; --full for all'})"
            )
        else:
            parts.append(f"fetched {checked:,} samples (iterable dataset)")
    if coverage.get("memory_samples"):
        parts.append(f"memory probe: {coverage['memory_samples']:,} samples")
    parts.append(
        f"{coverage.get('num_workers')} workers "
        f"({coverage.get('worker_start_method') or coverage.get('start_method')})"
    )
    if coverage.get("timeout_s") is not None:  # absent from records of older versions
        parts.append(f"timeout {coverage['timeout_s']:g} s per sample")
    if coverage.get("elapsed_s") is not None:
        parts.append(f"{coverage['elapsed_s']:.1f} s")
    return "; ".join(parts)


def _covered(coverage: dict[str, Any]) -> str:
    """`` in 1,234 of 2,000 indices (61.7%)``: a clean result always says how much was looked at."""
    checked = coverage.get("indices_checked")
    length = coverage.get("dataset_length")
    if checked is None:
        return ""
    if length:
        return (
            f" in {checked:,} of {length:,} indices ({coverage.get('fraction_checked') or 0.0:.1%})"
        )
    return f" in {checked:,} items of the stream"


def render_check(data: dict[str, Any], console: Console) -> None:
    findings = findings_of(data)
    coverage = data.get("coverage") or {}
    if not findings:
        console.print(f"[bold green]✓ no problems found{escape(_covered(coverage))}[/]")
    else:
        table = Table(
            title=f"check: {escape(str(data.get('target', '')))}",
            title_justify="left",
            show_lines=True,
        )
        table.add_column("", no_wrap=True)
        table.add_column("code", no_wrap=True)
        table.add_column("finding")
        for f in findings:
            style = _STYLE.get(f.severity, "")
            body = escape(f.message)
            line = evidence_line(f.evidence)
            if line:
                body += f"\n[dim]evidence: {escape(line)}[/]"
            if f.fix:
                body += f"\n[green]fix:[/] {escape(f.fix)}"
            table.add_row(
                f"[{style}]{_MARK.get(f.severity, '?')} {f.severity}[/]",
                f"[{style}]{f.code}[/]",
                body,
            )
        console.print(table)
        counts = {
            s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "info")
        }
        console.print(", ".join(plural(n, s) for s, n in counts.items() if n))
    if coverage:
        console.print(f"[dim]coverage: {escape(_coverage_line(coverage))}[/]")
        for note in coverage.get("notes") or []:
            console.print(f"[dim]note: {escape(note)}[/]")
        unchecked = coverage.get("not_checked") or []
        for entry in unchecked:
            codes = ", ".join(entry.get("codes") or []) or entry.get("probe", "")
            console.print(
                f"[yellow]not checked: {escape(codes)}[/][dim] ({escape(str(entry.get('probe')))} "
                f"probe): {escape(str(entry.get('reason')))}[/]"
            )
        named = {str(e.get("probe")) for e in unchecked}
        skipped = {
            k: v
            for k, v in (coverage.get("probes") or {}).items()
            if v not in ("done", "not selected") and k not in named
        }
        for probe, status in skipped.items():
            console.print(f"[dim]{probe} probe: {escape(status)}[/]")
