"""Facts of the code-change step (``code_changes``, ``code_changes_run``): what was applied inside
the probes, how it raced the best knob config, what it alters, and what did not apply and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..record.model import CodeChange, code_changes_of
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
    rows = [_row(e) for e in code_changes_of(r)]
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


def _row(entry: CodeChange) -> CodeChangeRow:
    alters = entry.side_effect.get("alters_output")
    return CodeChangeRow(
        id=entry.id,
        title=entry.title if entry.title is not None else entry.id,
        speedup=entry.speedup,
        rounds=entry.rounds or 0,
        samples_per_s=entry.samples_per_s,
        pick_samples_per_s=entry.pick_samples_per_s,
        side_effect=str(entry.side_effect.get("summary", "")),
        alters_output=alters if isinstance(alters, bool) else None,
        diff=entry.diff or None,
        apply=entry.apply,
        description=entry.description,
        unverified_reason=entry.unverified_reason,
        error=entry.error,
    )
