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


def against_document(new: Any, old: Any) -> dm.Document:
    n, o = as_record_dict(new), as_record_dict(old)
    facts = against_facts(n, o)
    rows = [
        [
            row["title"],
            _value(row["old"], row["unit"]),
            _value(row["new"], row["unit"]),
            rf.DASH if row["ratio"] is None else f"{row['ratio']:.3f}×",
            dm.Strong(row["judged"]) if row["judged"] == BEYOND else row["judged"],
        ]
        for row in facts["rows"]
    ]
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
    if rows:
        sections.append(
            dm.Section(
                "figures",
                "Figures side by side",
                [
                    dm.Table(
                        ["figure", "then (old)", "now (new)", "now / then", "judged"],
                        rows,
                        align="lrrrl",
                    )
                ],
            )
        )
    return dm.Document(
        title=f"stallscope {facts['command']} report against an earlier run",
        intro=intro,
        sections=sections,
    )
