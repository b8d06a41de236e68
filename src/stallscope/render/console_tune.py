"""Console summary of a tune record: what the tuner measured and raced (the evidence under the
verdict, which says the pick, how sure, and why)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..analysis import trials_by_config
from ..analysis.invariants import ran_label, relabel
from ..analysis.run_verdict import RunVerdict, decide
from ..analysis.tune_rules import TIE_SENTENCE, epoch_rule, tie_pct
from ..record.model import Best, ConfigRate, HeadToHead, Trial
from ..record.sections import TuneSection
from .console_table import titled_table
from .report_format import fmt_fixed, fmt_rate_cell, fmt_role


def render_tune(data: dict[str, Any], console: Console, *, max_rows: int = 14) -> None:
    tune = TuneSection.from_dict(data)
    if not tune.best or not tune.baseline:
        return
    best, baseline = Best.from_dict(tune.best), ConfigRate.from_dict(tune.baseline)
    trials = tune.typed_trials()
    search = tune.typed_search()
    region = search.region
    if region is not None and region.to_dict():
        console.print(
            f"[bold]Region:[/] {escape(region.name or '?')} — {escape(region.reason or '')}"
        )
    rows = trials_by_config(trials, data)
    table = titled_table(
        f"Configs measured ({len(trials)} runs in {tune.tuning_seconds or 0:.1f} s)",
        ["config", "phases", "samples/s", "runs", "vs baseline", "start-up s"],
        "llrrrr",
    )
    base_rate = baseline.samples_per_s or 0.0
    # The schema does not require labels: name a config from its settings where the record has none.
    pick_label = ran_label(data, best.config, best.label)
    verdict = decide(data)
    marked = _verdict_label(data, verdict, trials)
    for row in rows[:max_rows]:
        mark = "★ " if _same_knobs(row["label"], marked) else "  "
        rel = "–" if not row["rate"] or not base_rate else f"{row['rate'] / base_rate:.2f}×"
        table.add_row(
            mark + escape(row["label"]),
            ", ".join(row["phases"]),
            fmt_rate_cell(row["rate"]) if row["error"] is None else "[red]failed[/]",
            str(len(row["rates"]) or 1),
            rel,
            fmt_fixed(row["startup_s"], 2),
            style="bold green" if mark.strip() else None,
        )
    if len(rows) > max_rows:
        table.caption = f"{len(rows) - max_rows} more configs in the JSON record"
    console.print(table)
    # The pick, its gain, how sure and "keep yours" are the verdict's (printed first, NOTE [one
    # verdict]); the race's own evidence follows.
    if verdict.overruled is not None:
        console.print(
            f"The tuner's pick, {escape(pick_label)}, never raced the sweep's faster "
            f"{escape(verdict.label or '?')} and is set aside (see the verdict)."
        )
    rounds = (best.rounds if best.has("rounds") else search.rounds) or 0
    if best.confidence is None and best.has("rounds"):
        console.print(
            f"[bold yellow]Not confirmed: the budget ran out[/] after {rounds} interleaved "
            "round(s); no confidence."
        )
    if best.tie:
        console.print(
            f"{TIE_SENTENCE[0].upper() + TIE_SENTENCE[1:]} (rates within {tie_pct(best)}, "
            "paired by round)."
        )
    _render_head_to_head(data, best.head_to_head, verdict, console)
    for skipped in best.skipped:
        console.print(
            f"  skipped {escape(relabel(data, str(skipped.label)))}: {escape(str(skipped.why))}",
            style="dim",
        )
    gap = search.persistent_workers
    if gap and gap.gap_without_s is not None and gap.gap_with_s is not None:
        console.print(
            f"Epoch boundary ({escape(str(gap.measured_on))}): {gap.gap_without_s:.2f} s without, "
            f"{gap.gap_with_s:.2f} s with persistent workers "
            f"({'recommended' if gap.recommended else 'not recommended'})."
        )
    for note in search.notes:
        console.print(f"  · {escape(note)}", style="dim")


def _render_head_to_head(
    data: dict[str, Any], rows: tuple[HeadToHead, ...], verdict: RunVerdict, console: Console
) -> None:
    if not rows:
        return
    headers = ["config", "role", "median samples/s", "rounds"]
    # Where the rate per epoch decided (short epochs, NOTE [per-epoch rate]), it is shown beside.
    rule = epoch_rule(data)
    if rule is not None:
        headers.insert(3, "per epoch")
    table = titled_table(
        "Raced head to head (same interleaved rounds)", headers, "ll" + "r" * (len(headers) - 2)
    )
    for row in rows:
        cells = [
            escape(ran_label(data, row.config, row.label)),
            fmt_role(row.role, picked=verdict.names(row.config)),
            fmt_rate_cell(row.samples_per_s),
            str(row.rounds or "–"),
        ]
        if rule is not None:
            per_epoch = rule.rate_of(row.config)
            cells.insert(3, fmt_rate_cell(per_epoch))
        table.add_row(*cells)
    console.print(table)


def _same_knobs(label: str, pick_label: str | None) -> bool:
    """The pick may add persistent workers (same steady state): match the rest of the label."""
    if pick_label is None:
        return False
    strip: Callable[[str], str] = lambda text: " ".join(  # noqa: E731
        p for p in text.split() if p != "persistent"
    )
    return strip(label) == strip(pick_label)


def _verdict_label(data: dict[str, Any], verdict: RunVerdict, trials: list[Trial]) -> str | None:
    """The trials' own label of the verdict's config (persistent_workers aside), to mark it."""
    if verdict.config is None:
        return None
    for t in trials:
        if t.has("config") and verdict.names(t.config):
            return ran_label(data, t.config, t.label)
    return ran_label(data, verdict.config)
