"""``report NEW.json --against OLD.json``: the two records side by side, each figure with its own
noise."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..analysis.against import BEYOND, against_facts
from ..analysis.readers import as_record_dict, number
from ..text import plural
from . import document_model as dm
from . import report_format as rf


def _value(figure: dict[str, Any] | None, unit: str) -> str:
    if figure is None or figure["value"] is None:
        return rf.DASH
    fmt: Callable[[Any], str] = {
        "ms": rf.fmt_ms,
        "fraction": rf.fmt_fraction,
        "ratio": lambda v: f"{v:.3f}×",
    }.get(unit, rf.fmt_rate)
    text = fmt(figure["value"])
    if figure["low"] is not None and figure["high"] is not None:
        text += f" ({fmt(figure['low'])} to {fmt(figure['high'])})"
    return text


def _when(r: dict[str, Any]) -> str:
    started = number(r.get("started_at"))
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)) if started else "?"


def _figures_table(facts: dict[str, Any]) -> dm.Table:
    """Each figure then and now, with its noise, their ratio and whether it moved beyond it."""
    return dm.table(
        facts["rows"],
        [
            dm.Column("figure", lambda row: row["title"]),
            dm.Column("then (old)", lambda row: _value(row["old"], row["unit"]), "r"),
            dm.Column("now (new)", lambda row: _value(row["new"], row["unit"]), "r"),
            dm.Column(
                "now / then",
                lambda row: rf.DASH if row["ratio"] is None else f"{row['ratio']:.3f}×",
                "r",
            ),
            dm.Column(
                "judged",
                lambda row: dm.Strong(row["judged"]) if row["judged"] == BEYOND else row["judged"],
            ),
        ],
    )


def against_document(new: Any, old: Any) -> dm.Document:
    n, o = as_record_dict(new), as_record_dict(old)
    facts = against_facts(n, o)
    intro: list[dm.Block] = [
        dm.Paragraph(
            [
                f"{facts['command']} record of ",
                dm.Code(str(n.get("target", "?"))),
                f" ({_when(n)}) against the one of ",
                dm.Code(str(o.get("target", "?"))),
                f" ({_when(o)}).",
            ]
        )
    ]
    beyond = facts["counts"].get(BEYOND, 0)
    summary: list[dm.Block] = [
        dm.Paragraph(
            [
                dm.Strong(f"Verdict: {plural(beyond, 'figure')} beyond the noise."),
                " A difference inside the noise either record states is no difference; figures "
                "whose records state no noise are not judged. To measure a change, race both in "
                "one run with ",
                dm.Code("stallscope compare"),
                ".",
            ],
            style="verdict",
        )
    ]
    if facts["warnings"]:
        summary.append(dm.Bullets([[dm.Strong("Warning:"), " ", w] for w in facts["warnings"]]))
    sections = [dm.Section("summary", "Executive summary", summary)]
    if facts["rows"]:
        sections.append(dm.Section("figures", "Figures side by side", [_figures_table(facts)]))
    return dm.Document(
        title=f"stallscope {facts['command']} report against an earlier run",
        intro=intro,
        sections=sections,
    )
