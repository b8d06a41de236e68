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
from .document_checks import (
    checklist_section,
    findings_section,
    recommendations_section,
    troubleshooting_section,
)
from .document_costs import cpu_section, epoch_section, memory_section
from .document_model import (
    Bullets,
    Code,
    Document,
    Figure,
    Paragraph,
    Section,
    Strong,
    capital,
    config_code,
    plural,
)
from .document_results import (
    bench_section,
    best_section,
    stage_section,
    training_section,
    tuning_section,
)
from .report_format import (
    fmt_bytes,
    fmt_count,
    fmt_fraction,
    fmt_ms,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
)


# -- building --------------------------------------------------------------------
def build_document(record: Any) -> Document:
    """The report for one record: only the sections its data supports."""
    r = as_record_dict(record)
    facts = report_facts(r)
    headlines: list[list] = []
    sections: list[Section] = []
    builders = (
        bench_section,
        tuning_section,
        best_section,
        stage_section,
        training_section,
        epoch_section,
        memory_section,
        cpu_section,
        checklist_section,
        findings_section,
        recommendations_section,
        troubleshooting_section,
    )
    for build in builders:
        section, headline = build(facts, r)
        # A section with nothing but figures would be empty wherever the plot has no data.
        if section is not None and (section.subsections or any(not isinstance(b, Figure) for b in section.blocks)):
            sections.append(section)
        if headline:
            headlines.append(headline)
    summary = _summary_section(facts, headlines)
    if summary is not None:
        sections.insert(0, summary)
    return Document(title=f"stallscope {facts.command} report", intro=_intro(r), sections=sections)


def _intro(r: dict) -> list:
    blocks: list = []
    parts: list = ["Target ", Code(str(r.get("target", "?")))]
    started = number(r.get("started_at"))
    if started:
        parts.append(", run " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)))
    duration = number(r.get("duration_s"))
    if duration is not None:
        parts.append(f" for {fmt_seconds(duration)}")
    parts.append(f" with stallscope {r.get('tool_version', '?')}.")
    blocks.append(Paragraph(parts))
    host = _host_sentence(r.get("host") or {})
    if host:
        blocks.append(Paragraph(host))
    if r.get("partial"):
        blocks.append(Paragraph([Strong("Partial run:"), " the command was interrupted; the sections below hold "
                                 "what was measured before it stopped."]))
    return blocks


def _host_sentence(host: dict) -> list:
    facts = []
    if isinstance(host.get("cores"), int):
        text = f"{host['cores']} usable cores"
        if isinstance(host.get("logical_cpus"), int):
            text += f" of {host['logical_cpus']} logical CPUs"
        facts.append(text)
    if number(host.get("memory_bytes")):
        text = f"{fmt_bytes(host['memory_bytes'])} RAM"
        if number(host.get("memory_available_bytes")) is not None:
            text += f" ({fmt_bytes(host['memory_available_bytes'])} available)"
        facts.append(text)
    if number(host.get("shm_free_bytes")) is not None:
        facts.append(f"{fmt_bytes(host['shm_free_bytes'])} free in /dev/shm")
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
def _summary_section(facts: ReportFacts, headlines: list[list]) -> Section | None:
    blocks: list = []
    if facts.verdict is not None:
        blocks.append(Paragraph([Strong(f"Verdict: {facts.verdict.label}."), " ", *_verdict_text(facts.verdict)],
                                style="verdict " + facts.verdict.label.replace(" ", "-")))
    if headlines:
        blocks.append(Bullets(headlines))
    return Section("summary", "Executive summary", blocks) if blocks else None


def _verdict_text(v: Verdict) -> list:
    x = v.values
    if v.label == "unsafe":
        return [f"{plural(x['errors'], 'error finding')} ({', '.join(x['codes'])}): loading fails or misbehaves until "
                + ("it is" if x["errors"] == 1 else "they are") + " fixed, whatever the loader settings."]
    if v.label in ("input-bound", "compute-bound", "balanced"):
        parts = []
        if x.get("stall_fraction") is not None:
            parts.append(f"the training loop waited for data {fmt_fraction(x['stall_fraction'])} of its step time")
            if x.get("steps") is not None:
                parts[-1] += f" over {fmt_count(x['steps'])} steps"
        if x.get("what_if_speedup") is not None:
            parts.append(f"with free data it would run {fmt_ratio(x['what_if_speedup'])} faster")
        return [capital("; ".join(parts)) + "."] if parts else []
    if v.label == "near-optimal" and x.get("keep_baseline"):
        return ["Your loader ", config_code(x["baseline"]), f" is within {fmt_percent(x.get('within_pct'))} of the best "
                "found, ", config_code(x["best"]), f" ({fmt_rate(x['samples_per_s'])} vs "
                f"{fmt_rate(x['baseline_samples_per_s'])} samples/s): keep it; no change is recommended."]
    if v.label in ("loader-limited", "near-optimal"):
        return [config_code(x["best"]), f" delivers {fmt_rate(x['samples_per_s'])} samples/s, {fmt_ratio(x['speedup'])} the "
                "baseline ", config_code(x["baseline"]), f" ({fmt_rate(x['baseline_samples_per_s'])} samples/s)."]
    if v.label == "measured":
        return [config_code(x["best"]), f" was the fastest of {plural(x['configurations'], 'configuration')} measured, at "
                f"{fmt_rate(x['samples_per_s'])} samples/s."]
    if v.label == "stage-bound":
        return [f"{x['stage']} takes {fmt_ms(x['ms_per_sample'])} per sample, {fmt_fraction(x['share'])} of the "
                "measured per-sample time."]
    if v.label == "no errors":
        return [f"The checks found no errors ({plural(x['warnings'], 'warning')}, {plural(x['infos'], 'note')})."]
    return []


