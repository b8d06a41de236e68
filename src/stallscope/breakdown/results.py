"""What ``ss.stages`` returns and records: plain dataclasses (the record's ``stages`` section),
and the raw per-stage totals the worker run hands to the analysis (``table.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..record.as_dict import AsDict

ProgressFn = Callable[[str, float], None]  # (what is running, fraction done)

# Stages timed outside the worker's recorder (NOTE [stage timing] in recorder.py).
SERIALISE = "transfer: serialise"
QUEUE = "transfer: queue"
DESERIALISE = "transfer: deserialise"
PIN = "pin"
H2D = "host→device"


# -- results ---------------------------------------------------------------------------


@dataclass
class StageTime(AsDict):
    name: str
    ms_per_sample: float
    share: float
    # read | decode | user | transform | other | collate | serialise | queue | deserialise | pin
    # | h2d
    kind: str
    where: str  # worker | worker→main | main
    random: bool = False
    p50_ms: float | None = None  # per-sample percentiles, over the samples the stage ran in
    p90_ms: float | None = None
    parent: str | None = None  # the stage this row was broken out of (a callee of __getitem__)
    # Why this row cannot be right (it exceeds the measured time per batch: NOTE [stages add up] in
    # table.py); a doubtful row keeps its measurement but has no share and is not printed as a cost.
    doubtful: str | None = None


@dataclass
class AugmentationOverhead(AsDict):
    """Cost of the random transforms: their measured stage time, and a with/without run."""

    ms_per_sample: float
    percent: float  # of the per-sample cost without them
    transforms: list[str]
    source: str  # "detected" | "given"
    with_ms_per_sample: float | None = None  # __getitem__ in-process, all transforms
    without_ms_per_sample: float | None = None  # __getitem__ in-process, random ones skipped
    differential_ms_per_sample: float | None = None
    differential_percent: float | None = None
    samples: int = 0


@dataclass
class Hotspot(AsDict):
    function: str
    file: str
    line: int
    calls: int
    total_ms: float
    cumulative_ms: float
    ms_per_sample: float


@dataclass
class StorageSplit(AsDict):
    """Cold vs warm page cache: fetching from storage vs preparing on the CPU."""

    files: int
    bytes: int
    samples: int
    warm_ms_per_sample: float
    cold_ms_per_sample: float
    fetch_ms_per_sample: float
    prepare_ms_per_sample: float
    fetch_share: float


@dataclass
class StageRun(AsDict):
    """How the worker-side breakdown was taken."""

    num_workers: int
    batch_size: int
    start_method: str | None
    device: str | None
    samples: int
    batches: int
    warmup_batches: int
    seconds: float  # wall time of the worker run, start-up included
    transforms_found: int
    # The main process's steady time per batch in the same run (an upper estimate: the batches
    # the prefetch buffer held when the first arrived are not counted), or None when too few.
    batch_interval_ms: float | None = None


@dataclass
class StagesResult:
    stages: list[StageTime]
    augmentation_overhead: AugmentationOverhead | None
    hotspots: list[Hotspot]
    run: StageRun
    transfer: dict[str, Any] | None = None
    storage: StorageSplit | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def total_ms_per_sample(self) -> float:
        return sum(s.ms_per_sample for s in self.stages if not s.doubtful)

    def stage(self, name: str) -> StageTime:
        for item in self.stages:
            if item.name == name:
                return item
        raise KeyError(name)

    def inclusive_ms(self, name: str) -> float:
        """ms per sample of stage ``name`` with the rows broken out of it (``other``'s callees)."""
        return self.stage(name).ms_per_sample + sum(
            s.ms_per_sample for s in self.stages if s.parent == name
        )

    def to_dict(self) -> dict[str, Any]:
        """The record keys of the ``stages`` section (the record schema)."""
        return {
            "stages": [s.to_dict() for s in self.stages],
            "augmentation_overhead": self.augmentation_overhead.to_dict()
            if self.augmentation_overhead
            else None,
            "hotspots": [h.to_dict() for h in self.hotspots],
            "stage_run": self.run.to_dict(),
            "stage_total_ms_per_sample": self.total_ms_per_sample,
            "transfer": self.transfer,
            "storage": self.storage.to_dict() if self.storage else None,
            "stage_notes": list(self.notes),
        }


@dataclass
class RawStageTotals:
    """What the worker run measured, summed over the measured batches (seconds)."""

    stage_seconds: dict[str, float]
    samples: int
    batches: int
    transfer: dict[str, float] = field(
        default_factory=dict
    )  # TransferTimes field -> summed seconds
    main_seconds: dict[str, float] = field(default_factory=dict)  # pin / h2d
    batch_bytes: int = 0
    # stage -> per-sample seconds (per-batch stages: the batch's time / its samples)
    sample_times: dict[str, list[float]] = field(default_factory=dict)
