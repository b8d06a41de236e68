"""Console summary of a tune record: what was measured, the pick, how sure, and why."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

from ..analysis import best_configuration, recommendations, trials_by_config
from ..analysis.readers import config_label
from ..analysis.tune_rules import TIE_SENTENCE, tie_pct
from . import document_model as dm
from .console_advice import inline_markup, render_recommendations
from .document_results import best_section
from .report_format import fmt_fixed


def render_tune(data: dict[str, Any], console: Console, *, max_rows: int = 14) -> None:
    best, baseline = data.get("best"), data.get("baseline")
    if not best or not baseline:
        return
    search = data.get("search") or {}
    region = search.get("region") or {}
    if region:
        console.print(
            f"[bold]Region:[/] {escape(region.get('name', '?'))} — "
            f"{escape(region.get('reason', ''))}"
        )
    rows = trials_by_config(data.get("trials") or [])
    table = Table(
        title=(
            f"Configs measured ({len(data.get('trials') or [])} runs in "
            f"{data.get('tuning_seconds', 0):.1f} s)"
        ),
        title_justify="left",
    )
    columns: list[tuple[str, JustifyMethod]] = [
        ("config", "left"),
        ("phases", "left"),
        ("samples/s", "right"),
        ("runs", "right"),
        ("vs baseline", "right"),
        ("start-up s", "right"),
    ]
    for column, justify in columns:
        table.add_column(column, justify=justify)
    base_rate = baseline.get("samples_per_s") or 0.0
    # The schema does not require labels: name a config from its settings where the record has none.
    pick_label = config_label(best.get("config"), best.get("label"))
    base_label = config_label(baseline.get("config"), baseline.get("label"))
    for row in rows[:max_rows]:
        mark = "★ " if _same_knobs(row["label"], pick_label) else "  "
        rel = "–" if not row["rate"] or not base_rate else f"{row['rate'] / base_rate:.2f}×"
        table.add_row(
            mark + escape(row["label"]),
            ", ".join(row["phases"]),
            fmt_fixed(row["rate"]) if row["error"] is None else "[red]failed[/]",
            str(len(row["rates"]) or 1),
            rel,
            fmt_fixed(row["startup_s"], 2),
            style="bold green" if mark.strip() else None,
        )
    if len(rows) > max_rows:
        table.caption = f"{len(rows) - max_rows} more configs in the JSON record"
    console.print(table)
    speedup = best.get("speedup")
    confidence = best.get("confidence")
    winner = best_configuration(data)
    overruled = winner is not None and winner.overruled is not None
    console.print(
        ("Tuner's pick (set aside: see What to set)" if overruled else "Pick")
        + f": [bold]{escape(pick_label)}[/] at {best['samples_per_s']:,.1f} samples/s"
        + (
            f", {speedup:.2f}× the baseline ({escape(base_label)}, {base_rate:,.1f}/s)"
            if speedup
            else ""
        )
        + "."
    )
    rounds = best.get("rounds", search.get("rounds", 0)) or 0
    if confidence is not None:
        runner = best.get("runner_up")
        margin = best.get("margin")
        extra = (
            f"; runner-up {escape(runner)} at {1 / margin:.1%} of it" if runner and margin else ""
        )
        console.print(
            f"Confidence {confidence:.0%} that no other finalist is more than {tie_pct(best)} "
            f"faster ({rounds} interleaved round(s){extra})."
        )
    elif "rounds" in best:
        console.print(
            f"[bold yellow]Not confirmed: the budget ran out[/] after {rounds} interleaved "
            "round(s); no confidence."
        )
    if best.get("tie"):
        console.print(
            f"{TIE_SENTENCE[0].upper() + TIE_SENTENCE[1:]} (rates within {tie_pct(best)}, "
            "paired by round)."
        )
    if best.get("keep_baseline"):
        console.print(
            f"[bold]Keep yours:[/] your loader ({escape(baseline['label'])}) is within "
            f"{best.get('within_pct') or 0:.1f}% of the best found; no change is recommended."
        )
    _render_head_to_head(best.get("head_to_head") or [], console)
    for skipped in best.get("skipped") or []:
        console.print(
            f"  skipped {escape(skipped['label'])}: {escape(skipped['why'])}", style="dim"
        )
    gap = search.get("persistent_workers")
    if gap and gap.get("gap_without_s") is not None and gap.get("gap_with_s") is not None:
        console.print(
            f"Epoch boundary ({escape(gap['measured_on'])}): {gap['gap_without_s']:.2f} s without, "
            f"{gap['gap_with_s']:.2f} s with persistent workers "
            f"({'recommended' if gap.get('recommended') else 'not recommended'})."
        )
    for note in search.get("notes") or []:
        console.print(f"  · {escape(note)}", style="dim")


def _render_head_to_head(rows: list[dict[str, Any]], console: Console) -> None:
    if not rows:
        return
    table = Table(title="Raced head to head (same interleaved rounds)", title_justify="left")
    columns: list[tuple[str, JustifyMethod]] = [
        ("config", "left"),
        ("role", "left"),
        ("median samples/s", "right"),
        ("rounds", "right"),
    ]
    for column, justify in columns:
        table.add_column(column, justify=justify)
    for row in rows:
        table.add_row(
            escape(row["label"]),
            row["role"],
            fmt_fixed(row["samples_per_s"]),
            str(row.get("rounds") or "–"),
        )
    console.print(table)


def _same_knobs(label: str, pick_label: str | None) -> bool:
    """The pick may add persistent workers (same steady state): match the rest of the label."""
    if pick_label is None:
        return False
    strip: Callable[[str], str] = lambda text: " ".join(  # noqa: E731
        p for p in text.split() if p != "persistent"
    )
    return strip(label) == strip(pick_label)


def render_what_to_set(
    data: dict[str, Any], console: Console, *, with_recommendations: bool = True
) -> None:
    """The one winner in the reports' own sentence (``document_results.best_section``), the user's
    loader call with its knobs as run first (``loader_code``, NOTE [verified snippets]) or the
    change in words, then the analysed recommendations: what the Markdown and HTML reports say."""
    best = best_configuration(data)
    advice = data.get("loader_code") or {}
    code = advice.get("python") if advice.get("verified") else None
    if best is None and not (with_recommendations and recommendations(data)):
        return
    console.print()
    console.rule("[bold]What to set and why")
    if best is not None:
        section, _ = best_section(best, data)
        # best_section opens with its paragraph
        console.print(inline_markup(cast(dm.Paragraph, section.blocks[0]).parts))
        if code:
            console.print(escape(code))
        else:
            from ..analysis.tune_rules import advice_in_words

            console.print(
                escape(advice_in_words(advice or {"config": best.config, "reason": "not run"}))
            )
    if with_recommendations:
        render_recommendations(data, console)
