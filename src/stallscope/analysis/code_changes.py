"""Facts of the code-change step (``code_changes``, ``code_changes_run``): what was applied inside
the probes, how it raced the best knob config, what it alters, and what did not apply and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .readers import Record, config_label, number

# A change is worth recommending from this measured speed-up on: beyond two noise floors.
WORTH = 1.05


@dataclass
class CodeChangeRow:
    id: str
    title: str
    speedup: float | None
    rounds: int
    samples_per_s: float | None
    pick_samples_per_s: float | None
    side_effect: str
    alters_output: bool | None
    diff: str | None  # shown only when it ran for two batches
    apply: str | None  # how to apply it (patch -p0 …)
    description: str
    unverified_reason: str | None
    error: str | None

    @property
    def worth_it(self) -> bool:
        return self.speedup is not None and self.speedup >= WORTH and self.error is None


@dataclass
class CodeChangeFacts:
    rows: list[CodeChangeRow]
    not_applied: list[tuple[str, str]]  # (title, why)
    pick_label: str | None
    pick_samples_per_s: float | None
    rounds: int
    items: int
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> CodeChangeRow | None:
        worth = [r for r in self.rows if r.worth_it]
        return max(worth, key=lambda r: r.speedup or 0.0) if worth else None


def code_change_facts(r: Record) -> CodeChangeFacts | None:
    entries = r.get("code_changes")
    run: dict[str, Any] = (
        r["code_changes_run"] if isinstance(r.get("code_changes_run"), dict) else {}
    )
    if not isinstance(entries, list) and not run:
        return None
    rows = [_row(e) for e in entries or [] if isinstance(e, dict)]
    rows.sort(key=lambda row: -(row.speedup or 0.0))
    pick: dict[str, Any] = run["pick"] if isinstance(run.get("pick"), dict) else {}
    not_applied = [
        (str(n.get("title", n.get("id", "?"))), str(n.get("why", "")))
        for n in run.get("not_applied") or []
        if isinstance(n, dict)
    ]
    if not rows and not not_applied:
        return None
    return CodeChangeFacts(
        rows=rows,
        not_applied=not_applied,
        pick_label=config_label(pick.get("config"), pick.get("label")) if pick else None,
        pick_samples_per_s=number(pick.get("samples_per_s")),
        rounds=int(number(run.get("rounds")) or 0),
        items=int(number(run.get("items")) or 0),
        notes=[str(n) for n in run.get("notes") or []],
    )


def _row(entry: dict[str, Any]) -> CodeChangeRow:
    side: dict[str, Any] = (
        entry["side_effect"] if isinstance(entry.get("side_effect"), dict) else {}
    )
    alters = side.get("alters_output")
    return CodeChangeRow(
        id=str(entry.get("id", "?")),
        title=str(entry.get("title", entry.get("id", "?"))),
        speedup=number(entry.get("speedup")),
        rounds=int(number(entry.get("rounds")) or 0),
        samples_per_s=number(entry.get("samples_per_s")),
        pick_samples_per_s=number(entry.get("pick_samples_per_s")),
        side_effect=str(side.get("summary", "")),
        alters_output=alters if isinstance(alters, bool) else None,
        diff=entry.get("diff")
        if isinstance(entry.get("diff"), str) and entry.get("diff")
        else None,
        apply=entry.get("apply") if isinstance(entry.get("apply"), str) else None,
        description=str(entry.get("description", "")),
        unverified_reason=entry.get("unverified_reason")
        if isinstance(entry.get("unverified_reason"), str)
        else None,
        error=entry.get("error") if isinstance(entry.get("error"), str) else None,
    )
