"""The facts a report states, as plain dataclasses, and the named targets its checklist compares
against.

The rule modules build these from a record; renderers turn them into sentences, tables and plots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..record.as_dict import AsDict
from ..record.model import BenchResult
from ..thresholds import (
    INPUT_BOUND_AT,
    MEMORY_BUDGET_SHARE,
    SHM_WARN_FRACTION,
    STARTUP_SHARE_NOTABLE,
)

# Targets of the checklist: (pass boundary, fail boundary). Between the two a check warns.
# Pass boundaries shared with a rule elsewhere come from thresholds.py, so that a checklist row
# and the verdict or finding on the same number cannot disagree.
TARGETS: dict[str, tuple[float, float]] = {
    # Passes below the share at which the profiler calls a run input-bound; fails once the loop
    # waits for data half the time (a 2x what-if speed-up).
    "data_wait_fraction": (INPUT_BOUND_AT, 0.50),
    # A GPU busy 80% of the time is fed; under half, the input (or the host) starves it.
    "gpu_util_percent": (80.0, 50.0),
    # Random augmentation up to 30% of a sample's cost is usual; past 60% it is the pipeline.
    "augmentation_percent": (30.0, 60.0),
    # p95 within 1.5x the p50 batch time is steady; past 3x, stragglers stall the loop.
    "batch_time_ratio": (1.5, 3.0),
    # Workers scaling at 70% of linear use their cores; under 40%, more workers mostly contend.
    "parallel_efficiency": (0.70, 0.40),
    # Repeats within 5% of each other are trustworthy; past 15% a comparison needs more rounds.
    "measurement_noise": (0.05, 0.15),
    # Up to 1.1x over the user's loader there is little to gain; 2x means it was badly set.
    "tuning_headroom": (1.10, 2.0),
    # The shm-too-small finding's warning share; fails when in-flight batches exceed free /dev/shm.
    "shm_fraction": (SHM_WARN_FRACTION, 1.0),
    # Passes within the tuner's default memory budget (SPEC §7); past 80%, the OOM killer nears.
    "ram_fraction": (MEMORY_BUDGET_SHARE, 0.80),
    # Start-up worth advice from its notable share; a fifth of every epoch fails.
    "startup_fraction": (STARTUP_SHARE_NOTABLE, 0.20),
    # Any error finding fails.
    "error_findings": (0, 0),
}


@dataclass
class ConfigRate(AsDict):
    label: str
    config: dict[str, Any]
    samples_per_s: float


@dataclass
class BenchRow:
    label: str
    config: dict[str, Any]
    samples_per_s: float | None
    min_samples_per_s: float | None
    max_samples_per_s: float | None
    startup_s: float | None
    p50_ms: float | None
    p95_ms: float | None
    efficiency: float | None
    speedup: float | None
    noise: float | None
    repeats: int | None
    error: str | None
    is_best: bool = False


@dataclass
class BenchFacts:
    rows: list[BenchRow]
    measured: int
    failed: int
    cores: int | None
    single_process_ms_per_sample: float | None
    best: BenchRow | None
    # The best's rate per epoch, start-ups included, where that rate decided it (sweep_epochs.py);
    # its steady rate stays in ``best``.
    best_per_epoch: float | None
    plateau_workers: int | None
    repeats: int | None  # when every configuration had the same number of repeats
    worker_counts: list[int]
    latency_bound: (
        bool  # the best beats what the cores could do: more speed-up than cores, via more workers
    )
    batches_timed: int | None = None  # steady-state batches timed, all configurations and repeats
    window_s: float | None = None  # steady-state seconds those batches took
    # The GPU each measured batch was copied to (NOTE [delivered to the device]); None without one.
    delivered_to: str | None = None


@dataclass
class TrialRow:
    label: str
    phase: str | None
    samples_per_s: float
    vs_baseline: float | None


@dataclass
class HeadToHeadRow:
    """A config that raced the pick in the same interleaved rounds, and why it was there."""

    label: str
    config: dict[str, Any]
    samples_per_s: float
    rounds: int | None
    role: str  # baseline | sweep-best | tuner | other


@dataclass
class PersistentGap:
    """The epoch-boundary gap behind persistent_workers, measured with and without it."""

    measured_on: str
    gap_without_s: float | None
    gap_with_s: float | None
    saved_s: float | None
    recommended: bool


@dataclass
class TuningFacts:
    baseline: ConfigRate | None
    best: ConfigRate
    speedup: float | None
    confidence: Any
    seconds: float | None
    trials: int
    top_trials: list[TrialRow]
    failed_trials: list[tuple[str, str]] = field(default_factory=list)  # (label, error)
    runner_up: str | None = None
    margin: float | None = None  # best / runner-up
    region: str | None = None  # how the tuner classified the source (e.g. latency-bound)
    region_reason: str | None = None
    notes: list[str] = field(default_factory=list)
    rounds: int | None = None  # interleaved rounds the finalists raced
    confirmed: bool | None = None  # enough rounds for a confidence (None: an older record)
    head_to_head: list[HeadToHeadRow] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (label, why)
    keep_baseline: bool = False  # the best found is within noise of the user's own config
    within_pct: float | None = None
    plan: str | None = None
    tie: bool = (
        False  # another raced config was within tie_margin of the best; the cheaper was kept
    )
    tie_margin: float | None = None  # what the budget fit, said up front
    persistent: PersistentGap | None = None


@dataclass
class BestConfig:
    source: str  # "tune" or "bench"
    label: str
    config: dict[str, Any]
    samples_per_s: float
    speedup: float | None  # vs the baseline below
    baseline: ConfigRate | None
    result: BenchResult | None  # the bench result with this config, when measured there
    # The user's loader call with this config (render/loader_snippet.py, the one builder).
    snippet: str = ""
    # "Keep yours": the config above is the user's own, within ``within_pct`` % of ``best_found``.
    keep_baseline: bool = False
    within_pct: float | None = None
    best_found: ConfigRate | None = None
    # One winner: the tuner's pick set aside because the sweep measured this config faster beyond
    # the noise and the two never raced head to head.
    overruled: ConfigRate | None = None


@dataclass
class StageRow:
    name: str
    kind: str | None
    ms_per_sample: float
    share: float  # fraction of the summed stage time
    doubtful: str | None = (
        None  # why the row cannot be right (NOTE [stages add up] in breakdown/table.py)
    )


@dataclass
class AugmentationFacts:
    ms_per_sample: float | None
    percent: float | None
    transforms: list[str]
    with_ms: float | None = None  # per-sample time with and without the random transforms
    without_ms: float | None = None


@dataclass
class HotspotRow:
    function: str
    location: str
    calls: int | None
    total_ms: float | None
    cumulative_ms: float | None


@dataclass
class StageFacts:
    rows: list[StageRow]
    total_ms: float
    top: StageRow | None
    augmentation: AugmentationFacts | None
    hotspots: list[HotspotRow]
    run: dict[str, Any] = field(default_factory=dict)  # how the stages were measured (stage_run)
    notes: list[str] = field(default_factory=list)


@dataclass
class TrainingFacts:
    verdict: str | None
    stall_fraction: float | None
    steps: int | None
    gpu_util: float | None
    what_if_speedup: float | None
    first_batch_s: float | None
    mean_data_ms: float | None  # steady state (the record's data_ms.mean), else over the timeline
    mean_compute_ms: float | None
    occupancy: Any
    ranks: list[dict[str, Any]]
    advice: list[str]
    resources: dict[str, Any] | None
    config_label: str | None = None  # the loader the loop ran with
    epoch_steps: int | None = None
    first_batch_share: float | None = None  # of one epoch (startup_share_per_epoch)
    distributed: dict[str, Any] | None = None


@dataclass
class EpochRow:
    role: str  # "pick", "yours, kept" (the verdict keeps the user's config) or "baseline"
    label: str
    samples_per_s: float
    seconds: float
    batches: int | None
    startup_s: float | None
    persistent: bool


@dataclass
class EpochEstimate:
    length: int
    rows: list[EpochRow]
    saving_s: float | None  # baseline minus best


@dataclass
class MemoryRow:
    role: str  # "pick", "yours, kept" or "largest"
    label: str
    workers: int
    prefetch_factor: int
    batch_size: int | None
    batch_bytes: float
    in_flight_batches: int
    in_flight_bytes: float
    shm_fraction: float | None
    workers_rss_bytes: float | None
    ram_needed_bytes: float
    ram_fraction: float | None


@dataclass
class MemoryFacts:
    rows: list[MemoryRow]
    shm_free_bytes: float | None
    ram_available_bytes: float | None
    reference_batch_size: int | None
    reference_batch_bytes: float


@dataclass
class CpuRow:
    label: str
    workers: int
    main_percent: float
    workers_percent: float
    total_percent: float
    capacity_fraction: float | None  # of the usable cores
    main_rss_mb: float | None
    workers_rss_mb: float | None
    worker_uss_mb: float | None


@dataclass
class CpuUse:
    cores: int | None
    rows: list[CpuRow]
    focus: CpuRow  # the best configuration's row (or the training loop's)


@dataclass
class Target:
    key: str
    higher_is_better: bool
    good: float
    bad: float

    def status(self, value: float) -> str:
        if self.higher_is_better:
            return "pass" if value >= self.good else "warn" if value >= self.bad else "fail"
        return "pass" if value <= self.good else "warn" if value <= self.bad else "fail"


def target(key: str, *, higher_is_better: bool = False) -> Target:
    """The named target, by today's thresholds (an older record is judged again, as its verdict
    is: ``analysis.training.profile_verdict``)."""
    good, bad = TARGETS[key]
    return Target(key, higher_is_better, good, bad)


@dataclass
class CheckRow:
    name: str
    measured: float
    unit: str  # "fraction", "percent", "ratio", "count"
    target: Target
    subject: str | None = None  # the configuration measured, when it matters

    @property
    def status(self) -> str:
        return self.target.status(self.measured)


@dataclass
class FindingView:
    code: str
    severity: str
    message: str
    evidence: dict[str, Any]
    fix: str | None
    derived: dict[str, float] = field(default_factory=dict)


@dataclass
class FindingFacts:
    findings: list[FindingView]
    counts: dict[str, int]  # by severity


@dataclass
class Recommendation:
    id: str
    source: str  # "text" (sentences) or "analysis" (values a renderer words)
    title: Any = None
    detail: Any = None
    measured: Any = None
    expected_gain: Any = None
    values: dict[str, Any] = field(default_factory=dict)  # for derived advice


@dataclass
class Verdict:
    label: str
    values: dict[str, Any]


@dataclass
class ReportFacts:
    command: str
    target: str
    verdict: Verdict | None
    bench: BenchFacts | None
    tuning: TuningFacts | None
    best: BestConfig | None
    stages: StageFacts | None
    training: TrainingFacts | None
    epoch: EpochEstimate | None
    memory: MemoryFacts | None
    cpu: CpuUse | None
    checklist: list[CheckRow]
    findings: FindingFacts | None
    recommendations: list[Recommendation]
    code_changes: Any = None  # code_changes.CodeChangeFacts (kept apart: a section of its own)
    ceiling: Any = None  # ceiling.CeilingFacts: the machine's ceiling, the cores needed (issue 18)
