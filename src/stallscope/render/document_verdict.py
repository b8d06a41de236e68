"""The run's one verdict (``analysis.verdict.decide``, NOTE [one verdict]) as document blocks: the
same sentences open the console summary, the Markdown and the HTML report."""

from __future__ import annotations

from typing import Any

from ..analysis.invariants import factory_knobs
from ..analysis.readers import mapping
from ..analysis.run_verdict import RunVerdict, decide
from ..analysis.sections import loader_snippet
from ..analysis.tune_rules import advice_in_words, tie_pct
from ..record.model import Best, baseline_of, best_of
from ..text import plural
from . import document_model as dm
from . import report_format as rf
from .document_checks import recommendation_parts

# The configs within the run's noise named in the verdict; the rest are counted.
SHOWN = 4

# Recommendations the verdict's first sentence already makes (the config to use, or keep yours).
_SAID_BY_THE_VERDICT = {"loader-config", "keep-yours", "use-best-config"}


def _rate(v: RunVerdict, value: float | None) -> str:
    return f"{rf.fmt_rate(value)} {v.unit}/s"


def _decision(v: RunVerdict) -> dm.Text:
    if v.action == "keep-yours":
        parts: dm.Text = [
            dm.Strong("Keep yours:"),
            " ",
            dm.config_code(v.label or "your loader"),
            f" ran {_rate(v, v.samples_per_s)} ({v.measurement})",
        ]
        if v.best_found is not None and v.best_found != v.label:
            parts += [
                f"; it is within {rf.fmt_percent(v.within_pct)} of the fastest config found, ",
                dm.config_code(v.best_found),
                f" at {_rate(v, v.best_found_samples_per_s)}, inside the noise",
            ]
        return [*parts, "; no change is recommended."]
    lead = "Use" if v.action == "switch" else "Fastest in the sweep"
    parts = [
        dm.Strong(f"{lead}:"),
        " ",
        dm.config_code(v.label or "?"),
        f" at {_rate(v, v.samples_per_s)} ({v.measurement})",
    ]
    if v.gain is not None and v.baseline_label is not None:
        whose = (
            ("" if v.baseline_label.startswith("yours") else "your loader ")
            if v.source == "tune"
            else "one process, "
        )
        same = (
            (
                "in the same race"
                if v.rounds and v.baseline_rounds
                else "in the tuner's single measurement: it did not race"
                if v.rounds
                else "as the tuner measured it"
            )
            if v.source == "tune"
            else "in the same sweep"
        )
        parts += [
            f", {rf.fmt_ratio(v.gain)} {whose}",
            dm.config_code(v.baseline_label),
            f" ({_rate(v, v.baseline_samples_per_s)} {same}",
            f"; 90% interval of the paired ratio {rf.fmt_ratio(v.gain_interval[0])}–"
            f"{rf.fmt_ratio(v.gain_interval[1])})"
            if v.gain_interval
            else ")",
        ]
    if v.action == "measured":
        parts.append(": no gain beyond the noise to act on")
    return [*parts, "."]


def _by_reason(v: RunVerdict) -> list[tuple[str, str]]:
    """The steps not measured, those with the same reason on one line ("A, B, C: why")."""
    steps: dict[str, list[str]] = {}
    for what, why in v.not_measured:
        steps.setdefault(why, []).append(what)
    return [(", ".join(whats), why) for why, whats in steps.items()]


def _decided_by(v: RunVerdict) -> dm.Text | None:
    """Which rate decided, where it was the rate per epoch (NOTE [per-epoch rate])."""
    if v.decided_by is None:
        return None
    return [dm.capital(v.decided_by) + "."]


def _how_sure(v: RunVerdict, r: dict[str, Any]) -> dm.Text | None:
    if v.source != "tune" or v.action != "switch":
        return None  # keep yours: how sure the tuner is of its pick is not what the user acts on
    best = best_of(r) or Best()
    if v.confidence is not None:
        parts: dm.Text = [
            f"Confidence {rf.fmt_fraction(v.confidence)} that no other finalist is more than "
            f"{tie_pct(best)} faster ({plural(v.rounds or 0, 'paired round')})."
        ]
    elif any(p.figure == "the confidence" for p in v.problems):
        parts = ["No confidence is stated: the one recorded broke an invariant (below)."]
    elif v.rounds is None:
        parts = ["No confidence: the record does not say how many paired rounds were raced."]
    else:
        parts = [
            f"Not confirmed: {plural(v.rounds, 'paired round')} raced, fewer than a "
            "claim of how sure needs, so another run (doctor or tune) may pick another config."
        ]
    if v.tied_with is not None and v.tied_ratio is not None:
        interval = (
            f", 90% interval {rf.fmt_fraction(v.tied_interval[0])}–"
            f"{rf.fmt_fraction(v.tied_interval[1])}"
            if v.tied_interval
            else ""
        )
        sweep = ", the fastest in the sweep," if v.tied_with == v.fastest_in_sweep else ""
        parts += [
            " ",
            dm.config_code(v.tied_with),
            f"{sweep} ran at {rf.fmt_fraction(v.tied_ratio)} of it in the race "
            f"(paired by round{interval}): within the noise, so the cheaper config was kept.",
        ]
    if v.within_noise and v.noise_band is not None:
        parts.append(
            f" Within this run's noise of it (one config's own measurements spread by "
            f"{rf.fmt_fraction(v.noise_band)} in this run), so another run may name one of these: "
        )
        for i, (label, ratio, raced) in enumerate(v.within_noise[:SHOWN]):
            how = "raced" if raced else "not raced"
            parts += [
                ", " if i else "",
                dm.config_code(label),
                f" ({rf.fmt_fraction(ratio)}, {how})",
            ]
        more = len(v.within_noise) - SHOWN
        parts.append((f" and {plural(more, 'other')}" if more > 0 else "") + ".")
    if v.faster_not_raced and v.noise_band is not None:
        parts.append(
            " Measured faster than it outside the race, by more than this run's noise "
            f"({rf.fmt_fraction(v.noise_band)}), and never raced against it, so another run may "
            "pick it: "
        )
        for i, (label, ratio) in enumerate(v.faster_not_raced[:SHOWN]):
            parts += [", " if i else "", dm.config_code(label), f" ({rf.fmt_fraction(ratio)})"]
        parts.append(".")
    return parts


def _sweep(v: RunVerdict) -> dm.Text | None:
    if v.fastest_in_sweep is None or v.fastest_in_sweep == v.tied_with:
        return None
    if v.overruled is not None:
        return [
            "The tuner's pick ",
            dm.config_code(v.overruled),
            " never raced it head to head and was slower beyond the noise: set aside.",
        ]
    return [
        dm.config_code(v.fastest_in_sweep),
        f" was the fastest in the sweep: {v.fastest_in_sweep_note}.",
    ]


def _bound(v: RunVerdict) -> dm.Text | None:
    parts: list[str] = []
    if v.bound:
        parts.append(f"What bounds it: {v.bound}")
    if v.ceiling_share is not None and v.ceiling_samples_per_s is not None:
        who = "your loader" if v.action == "keep-yours" else "the config above"
        parts.append(
            f"{who} reaches {rf.fmt_fraction(v.ceiling_share)} of this machine's ceiling of "
            f"{_rate(v, v.ceiling_samples_per_s)} (Ceiling, below)"
        )
    if not parts:
        return None
    return (
        [dm.capital("; ".join(parts)) + "."]
        if len(parts) == 1 or not v.bound
        else [parts[0] + "; " + parts[1] + "."]
    )


def _buys_more(v: RunVerdict) -> dm.Text | None:
    more = v.buys_more
    if more is None:
        return None
    rounds = int(more.get("rounds") or 0)
    sure = "" if rounds >= 2 else ", not confirmed: a claim needs two paired rounds or more"
    return [
        dm.Strong("What buys more:"),
        f" code, not a setting: {more['title']} measured {rf.fmt_ratio(more['speedup'])} ",
        dm.config_code(str(more.get("against") or v.label or "the config above")),
        f" in {plural(rounds, 'paired round')}{sure} (Code changes, below).",
    ]


def unit_note(v: RunVerdict) -> dm.Text | None:
    if v.sample_unit is None:
        return None
    return [f"A sample here is one of the {v.sample_unit} a batch holds; rates count them."]


def verdict_blocks(r: dict[str, Any], v: RunVerdict | None = None) -> list[dm.Block]:
    """The verdict first (what a person acts on), as paragraphs, the code, bullets."""
    v = v if v is not None else decide(r)
    blocks: list[dm.Block] = []
    if v.action != "none":
        blocks.append(dm.Paragraph(_decision(v), style="verdict " + v.action))
    for text in (
        _decided_by(v),
        _how_sure(v, r),
        _sweep(v),
        _bound(v),
        _buys_more(v),
        unit_note(v),
    ):
        if text:
            blocks.append(dm.Paragraph(text))
    if v.config is not None and v.action in ("switch", "keep-yours"):
        blocks += _code(v, r)
    recs = [
        parts
        for rec in v.recommendations
        if rec.id not in _SAID_BY_THE_VERDICT and (parts := recommendation_parts(rec))
    ]
    if recs:
        blocks.append(dm.Paragraph(["Also measured to help:"]))
        blocks.append(dm.Bullets(recs))
    if v.problems:
        blocks.append(dm.Paragraph(["Figures that could not be true, left out:"]))
        blocks.append(dm.Bullets([[dm.Strong(p.sentence())] for p in v.problems]))
    if v.not_measured:
        blocks.append(dm.Paragraph(["Not measured:"]))
        blocks.append(
            dm.Bullets([[f"{what}: ", *dm.record_text(why)] for what, why in _by_reason(v)])
        )
    return blocks


def _code(v: RunVerdict, r: dict[str, Any]) -> list[dm.Block]:
    assert v.config is not None
    snippet = loader_snippet(r, v.config)
    if snippet:
        lead = (
            "Your loader call, unchanged:"
            if v.action == "keep-yours"
            else "Your loader call with these settings (# was marks what changed), run first:"
        )
        return [dm.Paragraph([lead]), dm.CodeBlock(snippet, "python")]
    if v.action == "keep-yours":
        return []
    advice = mapping(r.get("loader_code"))
    if advice.get("config") != v.config:
        takes = factory_knobs(r)
        advice = {
            "config": v.config,
            "baseline": baseline.config if (baseline := baseline_of(r)) else None,
            "knobs": None if takes is None else sorted(takes),
            "reason": "no call with these settings was run",
        }
    return [dm.Paragraph(dm.record_text(advice_in_words(advice)))]
