"""The report as a document (``document_model``), built once from the analysis facts.

The Markdown and HTML renderers both serialise this document, so the two reports say the same
thing. Every sentence is assembled from measured values (``stallscope.analysis.report_facts``); a
section whose facts are absent is left out. Numbers are printed only through ``report_format``.
Here: the intro and the executive summary; the section builders live in ``document_results``
(bench, tuning, best configuration, stages, training loop), ``document_costs`` (epoch, memory, CPU)
and ``document_checks`` (checklist, findings, recommendations, troubleshooting).
"""

from __future__ import annotations

import time
from typing import Any

from ..analysis import ReportFacts, Verdict, report_facts
from ..analysis.readers import as_record_dict, number
from ..text import plural
from . import document_model as dm
from . import report_format as rf
from .document_attach import attach_sections
from .document_ceiling import ceiling_section
from .document_changes import code_changes_section
from .document_checks import (
    checklist_section,
    findings_section,
    recommendations_section,
    troubleshooting_section,
)
from .document_compare import compare_sections
from .document_costs import cpu_section, epoch_section, memory_section
from .document_results import (
    bench_section,
    stage_section,
    training_section,
    tuning_section,
)
from .document_verdict import verdict_blocks

# (ReportFacts field, builder), in report order: each builder gets that field's facts and returns
# (section or None, headline or None).
SECTION_BUILDERS = (
    ("bench", bench_section),
    ("tuning", tuning_section),
    ("ceiling", ceiling_section),
    ("stages", stage_section),
    ("code_changes", code_changes_section),
    ("training", training_section),
    ("epoch", epoch_section),
    ("memory", memory_section),
    ("cpu", cpu_section),
    ("checklist", checklist_section),
    ("findings", findings_section),
    ("recommendations", recommendations_section),
    ("findings", troubleshooting_section),
)


# -- building --------------------------------------------------------------------
def build_document(record: Any) -> dm.Document:
    """The report for one record: only the sections its data supports."""
    r = as_record_dict(record)
    if r.get("command") == "compare":
        return dm.Document(
            title="stallscope compare report", intro=_intro(r), sections=compare_sections(r)
        )
    facts = report_facts(r)
    headlines: list[dm.Text] = []
    sections: list[dm.Section] = []
    for field, build in SECTION_BUILDERS:
        value = getattr(facts, field)
        if value is None or value == []:
            continue  # no facts, no section
        section, headline = build(value, r)
        # A section with nothing but figures would be empty wherever the plot has no data.
        if section is not None and (
            section.subsections or any(not isinstance(b, dm.Figure) for b in section.blocks)
        ):
            sections.append(section)
        # The config and its rate are the verdict's: a section's own headline on them would be a
        # second judge (NOTE [one verdict]).
        if headline and field not in ("bench", "tuning"):
            headlines.append(headline)
    sections[0:0] = attach_sections(r)
    summary = _summary_section(facts, headlines, verdict_blocks(r))
    if summary is not None:
        sections.insert(0, summary)
    return dm.Document(
        title=f"stallscope {facts.command} report", intro=_intro(r), sections=sections
    )


def _intro(r: dict[str, Any]) -> list[dm.Block]:
    blocks: list[dm.Block] = []
    parts: dm.Text = ["Target ", dm.Code(str(r.get("target", "?")))]
    started = number(r.get("started_at"))
    if started:
        parts.append(", run " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)))
    duration = number(r.get("duration_s"))
    if duration is not None:
        parts.append(f" for {rf.fmt_seconds(duration)}")
    parts.append(f" with stallscope {r.get('tool_version', '?')}.")
    blocks.append(dm.Paragraph(parts))
    host = _host_sentence(r.get("host") or {})
    if host:
        blocks.append(dm.Paragraph(host))
    if r.get("partial"):
        blocks.append(
            dm.Paragraph(
                [
                    dm.Strong("Partial run:"),
                    " the command was interrupted; the sections below hold "
                    "what was measured before it stopped.",
                ]
            )
        )
    return blocks


def _host_sentence(host: dict[str, Any]) -> dm.Text:
    facts = []
    if isinstance(host.get("cores"), int):
        text = f"{host['cores']} usable cores"
        if isinstance(host.get("logical_cpus"), int):
            text += f" of {host['logical_cpus']} logical CPUs"
        facts.append(text)
    if number(host.get("memory_bytes")):
        text = f"{rf.fmt_bytes(host['memory_bytes'])} RAM"
        if number(host.get("memory_available_bytes")) is not None:
            text += f" ({rf.fmt_bytes(host['memory_available_bytes'])} available)"
        facts.append(text)
    if number(host.get("shm_free_bytes")) is not None:
        facts.append(f"{rf.fmt_bytes(host['shm_free_bytes'])} free in /dev/shm")
    if host.get("python"):
        facts.append(f"Python {host['python']}")
    if host.get("torch"):
        facts.append(f"torch {host['torch']}")
    if host.get("gpu"):
        facts.append(f"GPU {host['gpu']}" + (f" (CUDA {host['cuda']})" if host.get("cuda") else ""))
    elif "gpu" in host:
        facts.append("no CUDA device")
    if host.get("platform"):
        facts.append(str(host["platform"]))
    return ["Host: " + ", ".join(facts) + "."] if facts else []


# -- executive summary -------------------------------------------------------------
def _summary_section(
    facts: ReportFacts, headlines: list[dm.Text], verdict: list[dm.Block]
) -> dm.Section | None:
    """The verdict first: what to use, how sure, what bounds it, what buys more, what was not
    measured (``document_verdict``); then the checks' and the other sections' headlines."""
    blocks: list[dm.Block] = list(verdict)
    if facts.verdict is not None and facts.verdict.label not in _SAID_BY_THE_VERDICT:
        blocks.append(
            dm.Paragraph(
                [dm.Strong(f"Verdict: {facts.verdict.label}."), " ", *_verdict_text(facts.verdict)],
                style="verdict " + facts.verdict.label.replace(" ", "-"),
            )
        )
    if headlines:
        blocks.append(dm.Bullets(headlines))
    return dm.Section("summary", "Verdict", blocks) if blocks else None


# Headline labels whose content (the config to use and its rate) the verdict says itself.
_SAID_BY_THE_VERDICT = {"near-optimal", "loader-limited", "measured"}


def _verdict_text(v: Verdict) -> dm.Text:
    x = v.values
    if v.label == "unsafe":
        return [
            f"{plural(x['errors'], 'error finding')} ({', '.join(x['codes'])}): loading "
            "fails or misbehaves until "
            + ("it is" if x["errors"] == 1 else "they are")
            + " fixed, whatever the loader settings."
        ]
    if v.label in ("input-bound", "compute-bound", "balanced"):
        parts = []
        if x.get("stall_fraction") is not None:
            parts.append(
                f"the training loop waited for data {rf.fmt_fraction(x['stall_fraction'])} of "
                "its step time"
            )
            if x.get("steps") is not None:
                parts[-1] += f" over {rf.fmt_count(x['steps'])} steps"
        if x.get("what_if_speedup") is not None:
            parts.append(f"with free data it would run {rf.fmt_ratio(x['what_if_speedup'])} faster")
        return [dm.capital("; ".join(parts)) + "."] if parts else []
    if v.label == "near-optimal" and x.get("keep_baseline"):
        return [
            "Your loader ",
            dm.config_code(x["baseline"]),
            f" is within {rf.fmt_percent(x.get('within_pct'))} of the best found, ",
            dm.config_code(x["best"]),
            f" ({rf.fmt_rate(x['samples_per_s'])} vs {rf.fmt_rate(x['baseline_samples_per_s'])} "
            "samples/s): keep it; no change is recommended.",
        ]
    if v.label in ("loader-limited", "near-optimal"):
        return [
            dm.config_code(x["best"]),
            f" delivers {rf.fmt_rate(x['samples_per_s'])} samples/s, {rf.fmt_ratio(x['speedup'])} "
            "the baseline ",
            dm.config_code(x["baseline"]),
            f" ({rf.fmt_rate(x['baseline_samples_per_s'])} samples/s).",
        ]
    if v.label == "measured":
        return [
            dm.config_code(x["best"]),
            f" was the fastest of {plural(x['configurations'], 'configuration')} measured, at "
            f"{rf.fmt_rate(x['samples_per_s'])} samples/s.",
        ]
    if v.label == "stage-bound":
        return [
            f"{x['stage']} takes {rf.fmt_ms(x['ms_per_sample'])} per sample, "
            f"{rf.fmt_fraction(x['share'])} of the measured per-sample time."
        ]
    if v.label == "no errors":
        return [
            f"The checks found no errors ({plural(x['warnings'], 'warning')}, "
            f"{plural(x['infos'], 'note')})."
        ]
    return []
