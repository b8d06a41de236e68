"""The ``compare`` report: B against A, the ratio with its interval, each side's figures and the
stage tables.

Sentences and tables only; the figures were concluded by ``analysis.comparison`` when the record was
made (``ratio``, ``change``, ``verdict``, ``gate``, ``figures``). Numbers print through
``report_format``.
"""

from __future__ import annotations

from typing import Any

from ..analysis.readers import number
from ..text import plural
from . import document_model as dm
from . import report_format as rf

# metric -> (row title, how its values print)
METRIC_ROWS = {
    "samples_per_s": ("samples/s", "rate"),
    "batch_ms_p95": ("per-batch wait p95", "ms"),
    "cpu_ms_per_sample": ("CPU per sample (main + workers)", "ms"),
    "workers_rss_mb": ("workers' RSS (all workers)", "mib"),
    "worker_uss_mb": ("private memory (USS) per worker", "mib"),
}


def fmt_exact_ratio(value: float | None) -> str:
    """A comparison ratio, three decimals: 0.847×."""
    return rf.DASH if value is None else f"{value:.3f}×"


def _fmt(value: float | None, kind: str) -> str:
    if kind == "mib":
        return rf.fmt_mib(value)
    return rf.fmt_quantity(value, kind)


def _level(ratio: dict[str, Any]) -> str:
    level = number(ratio.get("level"))
    return "" if level is None else f"{level * 100:.0f}% "


def verdict_sentence(r: dict[str, Any]) -> dm.Text:
    """The one-line verdict: how B compares with A, and how sure that is."""
    ratio = r.get("ratio") or {}
    change = r.get("change") or {}
    verdict = r.get("verdict") or "undecided"
    rounds = ratio.get("rounds") or 0
    if verdict == "undecided" or change.get("low") is None:
        return [
            dm.Strong("Verdict: undecided."),
            f" {plural(rounds, 'round')} measured (B/A "
            f"{fmt_exact_ratio(number(ratio.get('estimate')))}): too few for an interval; raise "
            "--budget.",
        ]
    interval = (
        f" ({_level(ratio)}interval {fmt_exact_ratio(ratio['low'])} to "
        f"{fmt_exact_ratio(ratio['high'])}, {plural(rounds, 'paired round')})"
    )
    if verdict == "within noise":
        return [
            dm.Strong("Verdict: within noise."),
            f" B/A samples/s is {fmt_exact_ratio(ratio['estimate'])}{interval}: no difference the "
            "measurement can tell apart.",
        ]
    direction = "slower" if verdict == "slower" else "faster"
    return [
        dm.Strong(f"Verdict: B is {direction}."),
        f" B delivers {rf.fmt_fraction(abs(change['estimate']))} "
        f"{'fewer' if direction == 'slower' else 'more'} samples/s than A: B/A "
        f"{fmt_exact_ratio(ratio['estimate'])}{interval}.",
    ]


def gate_sentence(r: dict[str, Any]) -> dm.Text | None:
    gate = r.get("gate")
    if not gate:
        return None
    pct = rf.fmt_percent(gate["fail_if_slower_pct"])
    bound = fmt_exact_ratio(gate["threshold_ratio"])
    if gate.get("failed"):
        return [
            dm.Strong("CI gate failed:"),
            f" --fail-if-slower {pct}: the whole interval lies below {bound}.",
        ]
    return [
        dm.Strong("CI gate passed:"),
        f" --fail-if-slower {pct}: the interval does not lie entirely below {bound}.",
    ]


def settings_sentence(r: dict[str, Any]) -> dm.Text | None:
    a, b = r.get("a") or {}, r.get("b") or {}
    if a.get("config") == b.get("config"):
        return ["Both sides ran at ", dm.Code(str(a.get("label", "?"))), "."]
    return [
        "The sides ran at different settings: A at ",
        dm.Code(str(a.get("label", "?"))),
        ", B at ",
        dm.Code(str(b.get("label", "?"))),
        "; the ratio includes that difference.",
    ]


def stop_sentence(r: dict[str, Any]) -> dm.Text | None:
    stopped = r.get("stopped")
    seconds = number(r.get("comparison_seconds"))
    settings = r.get("settings") or {}
    precision = number(settings.get("precision"))
    if stopped == "precision" and precision is not None:
        return [
            f"Stopped when the interval was narrower than ±{rf.fmt_fraction(precision)}, after "
            f"{rf.fmt_seconds(seconds)}."
        ]
    if stopped == "budget":
        return [
            f"Stopped at the budget after {rf.fmt_seconds(seconds)}"
            + (f", before reaching ±{rf.fmt_fraction(precision)}" if precision is not None else "")
            + "."
        ]
    return None


def figures_table(r: dict[str, Any]) -> dm.Table | None:
    figures = r.get("figures") or {}
    rows = []
    for metric, (title, kind) in METRIC_ROWS.items():
        entry = figures.get(metric)
        if not entry:
            continue
        a, b, ratio = entry.get("a") or {}, entry.get("b") or {}, entry.get("ratio") or {}
        interval = (
            f"{fmt_exact_ratio(ratio.get('low'))} to {fmt_exact_ratio(ratio.get('high'))}"
            if ratio.get("low") is not None
            else rf.DASH
        )
        rows.append(
            [
                title,
                _fmt(number(a.get("median")), kind),
                _noise(a),
                _fmt(number(b.get("median")), kind),
                _noise(b),
                fmt_exact_ratio(number(ratio.get("estimate"))),
                interval,
                entry.get("verdict") or rf.DASH,
            ]
        )
    if not rows:
        return None
    return dm.Table(
        [
            "figure",
            "A (median)",
            "A spread",
            "B (median)",
            "B spread",
            "B/A",
            "interval",
            "verdict",
        ],
        rows,
        align="lrrrrrrl",
    )


def _noise(side: dict[str, Any]) -> str:
    """A side's own window-to-window spread, (max - min) / median."""
    return rf.fmt_fraction(number(side.get("noise")))


def stage_table(r: dict[str, Any]) -> tuple[dm.Table | None, str | None]:
    stages = r.get("stages_compared") or {}
    if stages.get("error"):
        return None, stages["error"]
    rows = stages.get("rows") or []
    if not rows:
        return None, None
    table = dm.table(
        rows,
        [
            dm.Column("stage", lambda row: row["name"]),
            dm.Column(
                "A ms/sample", lambda row: rf.fmt_ms(number(row.get("a_ms_per_sample"))), "r"
            ),
            dm.Column(
                "B ms/sample", lambda row: rf.fmt_ms(number(row.get("b_ms_per_sample"))), "r"
            ),
            dm.Column("B − A", lambda row: _signed_ms(number(row.get("delta_ms_per_sample"))), "r"),
        ],
    )
    return table, None


def _signed_ms(value: float | None) -> str:
    if value is None:
        return rf.DASH
    return ("+" if value > 0 else "−" if value < 0 else "") + rf.fmt_ms(abs(value))


def compare_sections(r: dict[str, Any]) -> list[dm.Section]:
    """The executive summary (verdict, gate), the figures side by side and the stage tables."""
    summary: list[dm.Block] = [
        dm.Paragraph(
            verdict_sentence(r),
            style="verdict " + str(r.get("verdict") or "undecided").replace(" ", "-"),
        )
    ]
    bullets = [s for s in (gate_sentence(r), settings_sentence(r), stop_sentence(r)) if s]
    a, b = r.get("a") or {}, r.get("b") or {}
    bullets.append(
        [
            "A is ",
            dm.Code(str(a.get("target", "?"))),
            ", B is ",
            dm.Code(str(b.get("target", "?"))),
            ".",
        ]
    )
    summary.append(dm.Bullets(bullets))
    sections = [dm.Section("summary", "Executive summary", summary)]
    table = figures_table(r)
    if table is not None:
        sections.append(
            dm.Section(
                "figures",
                "A and B side by side",
                [
                    dm.Paragraph(
                        [
                            "Every figure of one side is the median of its windows, its spread "
                            "(max − min) / median over its windows; B/A and its interval come from "
                            "the paired rounds, as the rate's do."
                        ]
                    ),
                    table,
                ],
            )
        )
    stage, error = stage_table(r)
    if stage is not None or error:
        blocks: list[dm.Block] = (
            [
                dm.Paragraph(
                    [
                        "Where the difference comes from: each side's stage breakdown, the stage "
                        "that changed most first."
                    ]
                ),
                stage,
            ]
            if stage is not None
            else [dm.Paragraph([str(error)])]
        )
        sections.append(dm.Section("stages", "Stages of A and B", blocks))
    return sections
