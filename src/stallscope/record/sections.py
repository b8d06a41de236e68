"""The sections of a run record: every top-level key a command may write (SPEC §5).

Records are flat, so a section is a group of top-level keys written together (``bench`` writes
``results`` and ``scaling``). Each is a :class:`~.base.Section` dataclass: ``from_dict`` reads its
keys from a record dict, giving a key an older record lacks its default. A key no section here
declares cannot be added to a record (:meth:`RunRecord.add`), and ``schema/record-v1.json``
describes the same keys (a test checks the two agree). The items nested below a key (a bench result,
a trial, the pick, a finding, a window) are typed in :mod:`.model` and read through a section's
``typed_*`` accessors; what stays plain JSON is the producer's own shape (a finding's evidence).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from .base import Section, doc
from .model import (
    BenchResult,
    Best,
    CodeChange,
    ConfigRate,
    Finding,
    Hotspot,
    Search,
    Stage,
    Trial,
    Window,
)

JSON = dict[str, Any]


@dataclass
class PipelineSection(Section):
    """What every command says about the user's loader and dataset."""

    loader: JSON | None = doc("how the user built their loader: callable, imports, arguments")
    loader_kind: JSON | None = doc("the loader kind: name, description, knobs it has, its limits")
    dataset: JSON | None = doc("the dataset: length, an item's and a batch's structure")
    loader_code: JSON | None = doc("the picked config as verified Python code, or why not")
    not_run: list[JSON] = doc(
        "doctor: steps this loader kind cannot run, each with why", default_factory=list
    )
    step_failures: list[JSON] = doc(
        "doctor: steps that failed on the pipeline, each with its message", default_factory=list
    )


@dataclass
class Scaling(Section):
    """How the bench sweep scaled with workers (the ``scaling`` key)."""

    cores: int | None = doc("usable cores")
    single_process_ms_per_sample: float | None = doc("ms per sample at num_workers=0")
    best_label: str | None = doc("label of the fastest config")
    best_index: int | None = doc("index in results of the fastest config")
    plateau_workers: int | None = doc("fewest workers within the plateau of the best rate")
    ideal_samples_per_s: dict[str, float] = doc(
        "perfect-scaling rate by worker count", default_factory=dict
    )


@dataclass
class BenchSection(Section):
    """``bench`` (and doctor's sweep): one result per measured config."""

    results: list[JSON] = doc(
        "bench: one measured config each (rates as median/min/max spreads, batch times)",
        default_factory=list,
    )
    scaling: Scaling | None = doc("bench: how the rate scaled with workers; the best config")

    def typed_results(self) -> list[BenchResult]:
        """``results``, each read as a :class:`~.model.BenchResult`."""
        return BenchResult.list_of(self.results)


@dataclass
class TuneSection(Section):
    """``tune`` (and doctor's tune step)."""

    baseline: JSON | None = doc("tune: the user's own config and its rate")
    best: JSON | None = doc("tune: the picked config, its rate, speedup and head-to-head race")
    trials: list[JSON] = doc("tune: every measured trial, in order", default_factory=list)
    tuning_seconds: float | None = doc("tune: seconds the search took")
    search: JSON | None = doc("tune: the search's region, plan, finalists, space and notes")
    memory_budget: JSON | None = doc(
        "tune: the memory budget and the measured memory of the recommended config's workers"
    )

    def typed_best(self) -> Best | None:
        """``best`` read as a :class:`~.model.Best`."""
        return Best.of(self.best)

    def typed_baseline(self) -> ConfigRate | None:
        """``baseline`` read as a :class:`~.model.ConfigRate`."""
        return ConfigRate.of(self.baseline)

    def typed_trials(self) -> list[Trial]:
        """``trials``, each read as a :class:`~.model.Trial`."""
        return Trial.list_of(self.trials)

    def typed_search(self) -> Search:
        """``search`` read as a :class:`~.model.Search` (an empty one where there is none)."""
        return Search.of(self.search) or Search()


@dataclass
class CheckSection(Section):
    """``check`` (and doctor's check step)."""

    findings: list[JSON] = doc(
        "check: the findings (code, severity, message, evidence, fix)", default_factory=list
    )
    coverage: JSON | None = doc("check: which indices and probes the check covered")
    check_probes: JSON | None = doc("check: the probes' settings and measurements")

    def typed_findings(self) -> list[Finding]:
        """``findings``, each read as a :class:`~.model.Finding`."""
        return Finding.list_of(self.findings)


@dataclass
class StagesSection(Section):
    """``stages`` (and doctor's stages step)."""

    stages: list[JSON] = doc(
        "stages: ms per sample and share of each stage of a sample's path", default_factory=list
    )
    augmentation_overhead: JSON | None = doc("stages: cost of the random augmentations")
    hotspots: list[JSON] = doc("stages: the slowest functions (cProfile)", default_factory=list)
    stage_run: JSON | None = doc("stages: how the worker run was set up and what it measured")
    stage_total_ms_per_sample: float | None = doc("stages: sum of the stages, ms per sample")
    transfer: JSON | None = doc("stages: cost of moving a batch from worker to main process")
    storage: JSON | None = doc("stages: the read stage's storage, cold against warm cache")
    stage_notes: list[str] = doc("stages: notes on the breakdown", default_factory=list)

    def typed_stages(self) -> list[Stage]:
        """``stages``, each read as a :class:`~.model.Stage`."""
        return Stage.list_of(self.stages)

    def typed_hotspots(self) -> list[Hotspot]:
        """``hotspots``, each read as a :class:`~.model.Hotspot`."""
        return Hotspot.list_of(self.hotspots)


@dataclass
class CodeChangesSection(Section):
    """doctor's ``changes`` step: code changes measured against the picked config."""

    code_changes: list[JSON] = doc(
        "changes: each code change tried, its measured speedup and diff", default_factory=list
    )
    code_changes_run: JSON | None = doc("changes: the run's pick, rounds, budget and skips")

    def typed_code_changes(self) -> list[CodeChange]:
        """``code_changes``, each read as a :class:`~.model.CodeChange`."""
        return CodeChange.list_of(self.code_changes)


@dataclass
class ProfileSection(Section):
    """``profile``: the training loop's steps split into data wait and compute."""

    name: str | None = doc("profile: the watch's name")
    steps: int | None = doc("profile: steady steps the figures cover")
    total_steps: int | None = doc("profile: all recorded steps, warm-up and epoch starts too")
    warmup_steps: int | None = doc("profile: warm-up steps left out of the figures")
    requested_steps: int | None = doc("profile: the steps asked for")
    epochs: int | None = doc("profile: epochs the run started")
    epoch_steps: int | None = doc("profile: steps in one real epoch (null when unsized)")
    stall_fraction: float | None = doc("profile: share of each step spent waiting for data")
    verdict: str | None = doc(
        "profile: input-bound, compute-bound or balanced; compare: faster, slower, within noise "
        "or undecided"
    )
    what_if_speedup: float | None = doc("profile: the speedup if data were free")
    data_ms: JSON | None = doc("profile: data wait per step (mean, p50, p95, max, total_s)")
    compute_ms: JSON | None = doc("profile: compute per step (mean, p50, p95, max, total_s)")
    step_ms: JSON | None = doc("profile: whole step (mean, p50, p95, max, total_s)")
    steps_per_s: float | None = doc("profile: steady steps per second")
    first_batch_s: float | None = doc("profile: seconds to the first batch")
    epoch_start_s: list[float] = doc(
        "profile: seconds to each epoch's first batch", default_factory=list
    )
    startup_share: float | None = doc("profile: share of the run spent on epoch starts")
    startup_share_per_epoch: float | None = doc("profile: an epoch start's share of an epoch")
    wall_s: float | None = doc("profile: wall seconds of the watched loop")
    step_timeline: JSON | None = doc("profile: per-step data and compute ms (for plots)")
    timing: JSON | None = doc("profile: how data wait was timed")
    occupancy: JSON | None = doc("profile: ready batches in the loader's queue")
    gpu_util: float | None = doc("profile: mean GPU utilisation, percent")
    gpu: JSON | None = doc("profile: the GPU's figures, or why there are none")
    resources: JSON | None = doc("profile: CPU and memory of the main process and workers")
    sync: JSON | None = doc("profile: the device sync used to time compute")
    config: JSON | None = doc("profile: the loader config profiled")
    usable_cores: int | None = doc("profile: the cores this process may use (affinity, cgroup)")
    local_world_size: int | None = doc("profile: ranks sharing this host's cores")
    thresholds: JSON | None = doc("profile: the stall fractions the verdict was judged at")
    config_label: str | None = doc("profile: that config's label")
    device: str | None = doc("profile: the device the step ran on")
    train_step_call: str | None = doc("profile: how train_step was called")
    note: str | None = doc("profile: why the run stopped early, if it did")
    free_data_step_s: float | None = doc("profile: median step time on cached batches")
    free_data_steps: int | None = doc("profile: steps replayed on cached batches")
    free_data_batches: int | None = doc("profile: cached batches replayed")
    free_data_mean_step_s: float | None = doc("profile: mean step time on cached batches")


@dataclass
class DistributedSection(Section):
    """``profile`` under torchrun: every rank's figures."""

    ranks: list[JSON] | None = doc("profile: each rank's figures (null outside torchrun)")
    rank: int | None = doc("profile: this process's rank")
    world_size: int | None = doc("profile: ranks in the job")
    distributed: JSON | None = doc("profile: the ranks compared (slowest rank, spread)")


@dataclass
class LongRunSection(Section):
    """``profile``: the run cut into time windows, and memory over them (issue 20)."""

    window_s: float | None = doc("profile: length of the time windows (s)")
    windows: list[JSON] = doc("profile: the run's time windows", default_factory=list)
    pass_samples: int | None = doc(
        "profile: one epoch in samples (steps without a batch size), the pass the memory drift is "
        "judged over; null when unsized"
    )
    memory_drift: JSON | None = doc("profile: memory over the windows, per process")

    def typed_windows(self) -> list[Window]:
        """``windows``, each read as a :class:`~.model.Window`."""
        return Window.list_of(self.windows)


@dataclass
class CeilingSection(Section):
    """This machine's ceiling for the pipeline and the cores it needs (NOTE [ceiling])."""

    cpu_cost: JSON | None = doc("CPU and wall seconds per sample, or the error that stopped it")
    loader_rate: JSON | None = doc("profile: the profiled loader on its own, without the step")
    ceiling: JSON | None = doc("this machine's ceiling and the pick's share of it")
    cores_needed: JSON | None = doc("cores the pipeline needs at the target rate")


@dataclass
class CompareSection(Section):
    """``compare``: A against B in paired rounds."""

    a: JSON | None = doc("compare: side A's target, config and label")
    b: JSON | None = doc("compare: side B's target, config and label")
    configs: JSON | None = doc("compare: both sides' configs")
    labels: JSON | None = doc("compare: both sides' labels")
    rounds: list[JSON] = doc("compare: the paired rounds, four windows each", default_factory=list)
    stopped: str | None = doc("compare: why the rounds stopped")
    comparison_seconds: float | None = doc("compare: seconds the rounds took")
    settings: JSON | None = doc("compare: window, budget, precision and level")
    ratio: JSON | None = doc("compare: B/A and its interval")
    change: JSON | None = doc("compare: B against A as a change (ratio - 1)")
    verdict: str | None = doc("compare: faster, slower, within noise or undecided")
    precise: bool = doc("compare: the interval is within the precision asked for", default=False)
    gate: JSON | None = doc("compare: the --fail-if-slower gate and whether it failed")
    figures: JSON = doc("compare: each figure's A, B, ratio and verdict", default_factory=dict)
    stages_compared: JSON | None = doc("compare: both sides' stage tables and differences")


@dataclass
class AttachSection(Section):
    """``attach``: a running process sampled from outside (NOTE [attach sampling])."""

    attach: JSON | None = doc(
        "attach: data wait of the training thread with its interval, threads, workers, stuck "
        "threads and ranks, as counted from attach_capture"
    )
    attach_capture: JSON | None = doc(
        "attach: the samples (frames, stacks, each thread's run-length coded samples in time "
        "order), the process tree and the settings the figures are recounted from"
    )


SECTIONS: tuple[type[Section], ...] = (
    PipelineSection,
    BenchSection,
    TuneSection,
    CheckSection,
    StagesSection,
    CodeChangesSection,
    ProfileSection,
    DistributedSection,
    LongRunSection,
    CeilingSection,
    CompareSection,
    AttachSection,
)

# Keys a record written to a file carries that no probe writes: derived from the rest by analysis
# for readers of the JSON (a CI job), dropped on load and recomputed by whatever renders the record.
DERIVED_KEYS: dict[str, str] = {
    "analysis": "the run's one verdict as analysis derives it from the record (NOTE [one verdict] "
    "in analysis/run_verdict.py): for readers of the JSON; ignored on load, recomputed by report",
}


@functools.cache
def declared_keys() -> dict[str, str]:
    """Every section key with its description (a key in two sections joins both)."""
    keys: dict[str, str] = {}
    for section in SECTIONS:
        for name, text in section.docs().items():
            keys.setdefault(name, text)
    return keys
