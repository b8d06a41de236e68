"""Report sections that judge: the checklist, the findings, the recommendations and
troubleshooting."""

from __future__ import annotations

from typing import Any

from ..analysis import CheckRow, FindingFacts, FindingView, Recommendation
from ..analysis.readers import number
from ..text import plural
from . import document_model as dm
from . import report_format as rf


# -- checklist -------------------------------------------------------------------------------------
def _target_text(row: CheckRow) -> str:
    sign = "≥" if row.target.higher_is_better else "≤"
    return f"{sign} {rf.fmt_quantity(row.target.good, row.unit)}"


def checklist_section(
    checklist: list[CheckRow], r: dict[str, Any]
) -> tuple[dm.Section, dm.Text | None]:
    table = dm.table(
        checklist,
        [
            dm.Column("Check", lambda row: row.name),
            dm.Column("measured at", lambda row: dm.Code(row.subject) if row.subject else rf.DASH),
            dm.Column("measured", lambda row: rf.fmt_quantity(row.measured, row.unit), "r"),
            dm.Column("target", _target_text, "r"),
            dm.Column("status", lambda row: dm.Status(row.status)),
        ],
    )
    return dm.Section("checklist", "Checklist", [table]), None


# -- findings --------------------------------------------------------------------------------------
def findings_section(found: FindingFacts, r: dict[str, Any]) -> tuple[dm.Section, dm.Text | None]:
    c = found.counts
    summary = (
        f"{plural(len(found.findings), 'finding')}: {plural(c['error'], 'error')}, "
        f"{plural(c['warning'], 'warning')}, {plural(c['info'], 'note')}."
    )
    blocks: list[dm.Block] = [dm.Paragraph([summary])]
    coverage = r.get("coverage")
    if isinstance(coverage, dict) and coverage:
        blocks.append(
            dm.Paragraph(
                [
                    "Coverage: "
                    + "; ".join(
                        f"{k.replace('_', ' ')}: {rf.fmt_value(v)}"
                        for k, v in coverage.items()
                        if k != "not_checked"
                    )
                    + "."
                ]
            )
        )
        unchecked = [e for e in coverage.get("not_checked") or [] if isinstance(e, dict)]
        if unchecked:
            blocks.append(
                dm.Bullets(
                    [
                        [
                            f"Not checked: {', '.join(e.get('codes') or []) or e.get('probe')} "
                            f"({e.get('probe')} probe): {e.get('reason')}."
                        ]
                        for e in unchecked
                    ]
                )
            )
    if found.findings:
        blocks.append(
            dm.table(
                found.findings,
                [
                    dm.Column(
                        "Severity",
                        lambda f: dm.Status(
                            {"error": "fail", "warning": "warn"}.get(f.severity, "info")
                        ),
                    ),
                    dm.Column("Code", lambda f: dm.Code(f.code)),
                    dm.Column("Finding", lambda f: dm.record_text(f.message)),
                ],
            )
        )
    codes = sorted({f.code for f in found.findings if f.severity in ("error", "warning")})
    headline: dm.Text = [
        f"Checks: {plural(c['error'], 'error')}, {plural(c['warning'], 'warning')}, "
        f"{plural(c['info'], 'note')}" + (f" ({', '.join(codes)})" if codes else "") + "."
    ]
    return dm.Section("findings", "Check findings", blocks), headline


# -- recommendations -------------------------------------------------------------------------------
def recommendations_section(
    recommendations: list[Recommendation], r: dict[str, Any]
) -> tuple[dm.Section | None, dm.Text | None]:
    items = [recommendation_parts(rec) for rec in recommendations]
    items = [i for i in items if i]
    if not items:
        return None, None
    return dm.Section("recommendations", "Recommendations", [dm.Bullets(items)]), None


def recommendation_parts(rec: Recommendation) -> dm.Text:
    """One recommendation as inline parts (the console prints the same, ``console_advice``)."""
    if rec.source == "text":
        parts: dm.Text = [dm.Strong(rf.fmt_value(rec.title or rec.id).replace("`", ""))]
        if rec.detail:
            parts += [" — ", *dm.record_text(rf.fmt_value(rec.detail))]
        if rec.measured is not None:
            parts += [" Measured: ", *dm.record_text(rf.fmt_value(rec.measured)), "."]
        if rec.expected_gain is not None:
            gain = rec.expected_gain
            parts.append(
                " Expected gain: "
                f"{rf.fmt_ratio(gain) if isinstance(gain, float) else rf.fmt_value(gain)}."
            )
        return parts
    x = rec.values
    if rec.id == "use-best-config":
        return [
            dm.Strong("Switch to"),
            " ",
            dm.Code(x["label"]),
            f" — measured {rf.fmt_rate(x['samples_per_s'])} samples/s against "
            f"{rf.fmt_rate(x['baseline_samples_per_s'])} for ",
            dm.Code(x["baseline"]),
            f". Expected gain: {rf.fmt_ratio(x['speedup'])} loader throughput.",
        ]
    if rec.id == "persistent-workers":
        # An epoch without it is its loading at the pick's rate plus the gap: the gain is a share
        # of that, never of the loading alone (which the gap can exceed on short epochs).
        epoch = (
            f", of a {rf.fmt_seconds(x['epoch_s'] + x['gap_without_s'])} epoch without it "
            f"({rf.fmt_seconds(x['epoch_s'])} of loading at this rate, plus the gap)"
            if x.get("epoch_s")
            else ""
        )
        inside: list[dm.Inline] = (
            [
                " in the DataLoader call inside ",
                dm.Code(x["inside"]),
                " (it takes no such parameter)",
            ]
            if x.get("inside")
            else []
        )
        return [
            dm.Strong("Set persistent_workers=True"),
            *inside,
            " — at ",
            dm.Code(x["label"]),
            f" the gap at an epoch boundary measured {rf.fmt_seconds(x['gap_without_s'])} without "
            f"it and {rf.fmt_seconds(x['gap_with_s'])} with it. Expected gain: "
            f"{rf.fmt_seconds(x['saved_s'])} per epoch after the first{epoch}.",
        ]
    return []


# -- troubleshooting -------------------------------------------------------------------------------
_STACK_KEYS = ("stack", "traceback", "where")


def troubleshooting_section(
    found: FindingFacts, r: dict[str, Any]
) -> tuple[dm.Section | None, dm.Text | None]:
    if not found.findings:
        return None, None
    section = dm.Section("troubleshooting", "Troubleshooting")
    for f in found.findings:
        blocks: list[dm.Block] = []
        if f.message:
            blocks.append(dm.Paragraph(dm.record_text(f.message)))
        evidence: list[dm.Text] = []
        stacks: list[str] = []
        for key, value in f.evidence.items():
            if value is None or value == [] or value == {}:
                continue
            if key in _STACK_KEYS and (
                isinstance(value, list) or (isinstance(value, str) and "\n" in value)
            ):
                stacks.append(
                    "\n".join(map(_stack_line, value)) if isinstance(value, list) else value
                )
            else:
                evidence.append([f"{key.replace('_', ' ')}: ", evidence_value(key, value)])
        if evidence:
            blocks.append(dm.Bullets(evidence))
        blocks += [dm.CodeBlock(s) for s in stacks]
        derived = _derived_text(f)
        if derived:
            blocks.append(dm.Paragraph(derived))
        if f.fix:
            blocks.append(dm.Paragraph([dm.Strong("Fix:"), " ", *dm.record_text(f.fix)]))
        section.subsections.append(
            dm.Section(f"finding-{f.code}", f"{f.code} ({f.severity})", blocks)
        )
    return section, None


def _stack_line(frame: Any) -> str:
    """A stack frame as ``file:line in function`` (frames come as dicts or strings)."""
    if isinstance(frame, dict) and frame.get("file"):
        text = f"{frame['file']}:{frame.get('line', '?')}"
        return text + (f" in {frame['function']}" if frame.get("function") else "")
    return str(frame)


def evidence_value(key: str, value: Any) -> str:
    """Evidence by the unit its key names: *_bytes, *_mb, *_ms, *_s; indices and pids as plain
    integers."""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {evidence_value(str(k), v)}" for k, v in value.items())
    if (
        isinstance(value, list)
        and value
        and all(number(v) is not None or isinstance(v, dict) for v in value)
    ):
        return ", ".join(evidence_value(key, v) for v in value)
    if number(value) is None:
        return rf.fmt_value(value)
    if "per_1000" in key:  # a rate (MB per thousand samples), not an amount
        return rf.fmt_value(value)
    if isinstance(value, int) and (
        key in ("index", "indices", "pid") or key.endswith(("_index", "_pid"))
    ):
        return str(value)
    if key.endswith("bytes"):
        return rf.fmt_bytes(value)
    if (
        key.endswith("_mb") or "_mb_" in key
    ):  # MiB, as the resource sampler and the checks report it
        return rf.fmt_mib(value)
    if key == "ms" or key.endswith("_ms") or "_ms_" in key:
        return rf.fmt_ms(value)
    if key.endswith("fraction"):
        return rf.fmt_fraction(value)
    if key.endswith("_s") or key.endswith("seconds"):
        return rf.fmt_seconds(value)
    return rf.fmt_value(value)


def _derived_text(f: FindingView) -> dm.Text:
    d = f.derived
    if f.code == "memory-growth" and "epoch_mb_per_worker" in d:
        text = (
            f"At {rf.fmt_value(d['mb_per_1000'])} MB per thousand samples, one epoch of "
            f"{rf.fmt_count(d['epoch_samples'])} samples adds about "
            f"{rf.fmt_value(d['epoch_mb_per_worker'])} MB per worker"
        )
        parts: dm.Text = [text]
        if "epoch_mb_all_workers" in d:
            parts.append(
                f", {rf.fmt_value(d['epoch_mb_all_workers'])} MB across {int(d['workers'])} workers"
            )
        parts.append(".")
        return parts
    if f.code == "slow-samples" and "slowest_s" in d:
        parts = [
            f"The slowest sample, index {int(d['slowest_index'])}, took "
            f"{rf.fmt_seconds(d['slowest_s'])}"
        ]
        if "median_s" in d:
            parts.append(
                f", {rf.fmt_ratio(d['slowest_s'] / d['median_s'])} the median sample "
                f"({rf.fmt_seconds(d['median_s'])})"
            )
        return [*parts, "."]
    if f.code == "oversubscription" and "threads" in d:
        return [
            f"{int(d['num_workers'])} workers × {int(d['threads_per_worker'])} threads each = "
            f"{int(d['threads'])} threads for {int(d['cores'])} usable cores, "
            f"{rf.fmt_ratio(d['threads'] / d['cores'])} oversubscribed."
        ]
    if f.code == "shm-too-small" and "in_flight_bytes" in d:
        return [
            f"The largest in-flight set measured is {int(d['in_flight_batches'])} batches, "
            f"{rf.fmt_bytes(d['in_flight_bytes'])}, against {rf.fmt_bytes(d['shm_free_bytes'])} "
            "free in /dev/shm."
        ]
    return []
