"""Report analysis: one entry, :func:`report_facts`, from a run record to every fact a report
states.

Renderers never compute: they ask :func:`report_facts` for a :class:`~.facts.ReportFacts` and turn
each fact into sentences, tables and plots. Every function of this layer reads only the record
(schema §5, see ``stallscope/schema/record-v1.json``); a section whose data is absent yields
``None`` or an empty list, and the report omits it.

The pieces, one module each: ``readers`` (safe reads of the record), ``facts`` (the dataclasses and
the checklist's named targets), ``sections`` (bench, tuning, best configuration, stages, training
loop), ``costs`` (epoch time, memory, CPU), and the rule lists, kept the way pyinstrument keeps its
default processors: ``verdict_rules.VERDICT_RULES`` (first match wins),
``checklist_rules.CHECKLIST_RULES`` (one row each), ``recommendation_rules.RECOMMENDATION_RULES``
(each piece of advice from one rule, over the measurements; advice a record carries is not read) and
``finding_rules.FINDING_RULES`` (per finding code, numbers that help troubleshoot). A caller can
pass its own lists.

The only numbers not taken from the record are the named ``facts.TARGETS`` the checklist compares
against.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .ceiling import ceiling_facts
from .checklist_rules import checklist
from .code_changes import code_change_facts
from .costs import cpu_use, epoch_estimate, memory_facts
from .facts import ReportFacts
from .finding_rules import finding_facts
from .readers import as_record_dict
from .recommendation_rules import recommendations
from .sections import bench_facts, best_configuration, stage_facts, training_facts, tuning_facts
from .verdict_rules import verdict

# ReportFacts field -> the function of the record that gives it.
SECTIONS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "verdict": verdict,
    "bench": bench_facts,
    "tuning": tuning_facts,
    "best": best_configuration,
    "stages": stage_facts,
    "training": training_facts,
    "epoch": epoch_estimate,
    "memory": memory_facts,
    "cpu": cpu_use,
    "checklist": checklist,
    "findings": finding_facts,
    "recommendations": recommendations,
    "code_changes": code_change_facts,
    "ceiling": ceiling_facts,
}


def report_facts(record: Any) -> ReportFacts:
    """All the facts a report states, from a RunRecord or its dict."""
    r = as_record_dict(record)
    sections = {name: facts_of(r) for name, facts_of in SECTIONS.items()}
    return ReportFacts(
        command=str(r.get("command", "?")), target=str(r.get("target", "?")), **sections
    )
