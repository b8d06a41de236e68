"""The analysis layer: pure functions from a run record to what a report states. Nothing here
measures or prints.

``report_facts(record)`` (module ``report``) gathers every fact of a report: ``sections`` (bench,
tuning, best configuration, stages, training loop) and ``costs`` (epoch, memory, CPU) build the
dataclasses of ``facts``; the small named rules of ``verdict_rules``, ``checklist_rules``,
``finding_rules`` and ``recommendation_rules`` judge them; ``readers`` reads the record safely.
``training`` judges a training loop's step timeline (verdict, stall fraction, advice) for
``watch``/``profile``. ``run_verdict.decide(record)`` is the run's one verdict every surface prints
first (NOTE [one verdict]), after the checks of ``invariants`` (NOTE [invariants]).

The names below are the layer's interface; renderers and tests import them from here.
"""

from __future__ import annotations

from .checklist_rules import CHECKLIST_RULES, checklist
from .costs import cpu_use, epoch_estimate, memory_facts
from .facts import (
    TARGETS,
    AugmentationFacts,
    BenchFacts,
    BenchRow,
    BestConfig,
    CheckRow,
    ConfigRate,
    CpuRow,
    CpuUse,
    EpochEstimate,
    EpochRow,
    FindingFacts,
    FindingView,
    HotspotRow,
    MemoryFacts,
    MemoryRow,
    Recommendation,
    ReportFacts,
    StageFacts,
    StageRow,
    Target,
    TrainingFacts,
    TrialRow,
    TuningFacts,
    Verdict,
)
from .finding_rules import FINDING_RULES, SEVERITY_ORDER, finding_facts
from .recommendation_rules import RECOMMENDATION_RULES, recommendations
from .report import report_facts
from .run_verdict import RunVerdict, decide
from .sections import (
    bench_facts,
    best_configuration,
    loader_snippet,
    stage_facts,
    training_facts,
    trials_by_config,
    tuning_facts,
)
from .verdict_rules import VERDICT_RULES, verdict

__all__ = [
    "CHECKLIST_RULES",
    "FINDING_RULES",
    "RECOMMENDATION_RULES",
    "SEVERITY_ORDER",
    "TARGETS",
    "VERDICT_RULES",
    "AugmentationFacts",
    "BenchFacts",
    "BenchRow",
    "BestConfig",
    "CheckRow",
    "ConfigRate",
    "CpuRow",
    "CpuUse",
    "EpochEstimate",
    "EpochRow",
    "FindingFacts",
    "FindingView",
    "HotspotRow",
    "MemoryFacts",
    "MemoryRow",
    "Recommendation",
    "ReportFacts",
    "RunVerdict",
    "StageFacts",
    "StageRow",
    "Target",
    "TrainingFacts",
    "TrialRow",
    "TuningFacts",
    "Verdict",
    "bench_facts",
    "best_configuration",
    "checklist",
    "cpu_use",
    "decide",
    "epoch_estimate",
    "finding_facts",
    "loader_snippet",
    "memory_facts",
    "recommendations",
    "report_facts",
    "stage_facts",
    "training_facts",
    "trials_by_config",
    "tuning_facts",
    "verdict",
]
