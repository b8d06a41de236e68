"""The items nested below a record's top-level keys, typed (SPEC §5): a bench result, a tuner's
trial, its pick (``best``) with the head-to-head race, a check's finding, a profile's time window.

A section (:mod:`.sections`) types a record's top level; these type what its lists and objects
hold, as pyinstrument's ``Frame`` types a session's tree. Each is a frozen dataclass read with
``from_dict`` and written back with ``to_dict``:

* a key an older record lacks takes the field's default, so a reader never guards a key;
* a key this version does not know, and a value of the wrong JSON type (the field then takes its
  default), are kept in ``extra``, so ``to_dict(from_dict(x)) == x`` for what a record holds;
* ``to_dict`` writes the keys the item was read with (all of them for an item made in code).

The JSON a command writes is made by the probes; these classes are for readers.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import threading
import types
import typing
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union

I = TypeVar("I", bound="Item")  # noqa: E741

JSON = dict[str, Any]

_INTERNAL = {"internal": True}


def _internal(**kwargs: Any) -> Any:
    """A field that is no key of the record (what the item was read from)."""
    return field(metadata=_INTERNAL, compare=False, repr=False, kw_only=True, **kwargs)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _item_type(hint: Any) -> type[Item] | None:
    """The Item class ``hint`` names (``Spread | None`` gives Spread), if it names one."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else ()
    for arg in args or (hint,):
        if isinstance(arg, type) and issubclass(arg, Item):
            return arg
    return None


_MISMATCH = object()


def _read(value: Any, hint: Any) -> Any:
    """``value`` as the field typed ``hint`` holds it, or ``_MISMATCH`` when it is of another JSON
    type (shallow for dicts: their values stay the record's own)."""
    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(hint):
            got = _read(value, arg)
            if got is not _MISMATCH:
                return got
        return _MISMATCH
    if hint is type(None):
        return None if value is None else _MISMATCH
    if origin is tuple:  # tuple[X, ...]: a JSON list
        if not isinstance(value, list):
            return _MISMATCH
        (arg, _) = typing.get_args(hint)
        items = [_read(v, arg) for v in value]
        if any(v is _MISMATCH for v in items):
            return _MISMATCH
        return tuple(items)
    if origin is dict:
        return dict(value) if isinstance(value, Mapping) else _MISMATCH
    if isinstance(hint, type) and issubclass(hint, Item):
        if isinstance(value, Mapping):
            return hint.from_dict(value)
        return hint.from_scalar(value)
    if hint is float:
        return value if _is_number(value) else _MISMATCH
    if hint is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _MISMATCH
    if hint is bool:
        return value if isinstance(value, bool) else _MISMATCH
    if hint is str:
        return value if isinstance(value, str) else _MISMATCH
    raise TypeError(f"no JSON reading for {hint!r}")


def _write(value: Any) -> Any:
    if isinstance(value, Item):
        return value.to_value()
    if isinstance(value, tuple):
        return [_write(v) for v in value]
    if isinstance(value, dict):
        return dict(value)
    return value


def field_default(f: dataclasses.Field[Any]) -> Any:
    """A dataclass field's default (its factory called), None where it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


_KEYS: dict[type[Item], tuple[tuple[dataclasses.Field[Any], Any], ...]] = {}


def _keys(cls: type[Item]) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    """The fields of ``cls`` that are record keys, with their type hints (read once per class)."""
    keys = _KEYS.get(cls)
    if keys is None:
        hints = typing.get_type_hints(cls)
        keys = _KEYS[cls] = tuple(
            (f, hints[f.name]) for f in dataclasses.fields(cls) if not f.metadata.get("internal")
        )
    return keys


# The items read last from each list, as read, with a copy of what they were read from: analysis
# reads the same list for every row it labels, so a list still equal to its copy is not read
# again (one edited in place is). Holding the list keeps its id from being reused.
_READ: OrderedDict[tuple[type, int], tuple[list[Any], list[Any], tuple[Any, ...]]] = OrderedDict()
_READ_MAX = 64
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Item:
    """Base of the nested record items: ``from_dict``/``to_dict`` over the dataclass's fields."""

    # Keys the record held that no field names, and values of the wrong type, as they were.
    extra: JSON = _internal(default_factory=dict)
    # The keys the item was read with; None for an item made in code (every key is written).
    present: frozenset[str] | None = _internal(default=None)

    @classmethod
    def from_dict(cls: type[I], data: Mapping[str, Any]) -> I:
        """The item a record's dict holds; a key it lacks takes its default (older records)."""
        kwargs: dict[str, Any] = {}
        extra: JSON = {}
        for f, hint in _keys(cls):
            if f.name not in data:
                continue
            value = _read(data[f.name], hint)
            if value is _MISMATCH:
                extra[f.name] = data[f.name]
            else:
                kwargs[f.name] = value
        names = {f.name for f, _ in _keys(cls)}
        extra.update({k: v for k, v in data.items() if k not in names})
        return cls(**kwargs, extra=extra, present=frozenset(data))

    @classmethod
    def from_scalar(cls: type[I], value: Any) -> I | object:
        """The item an older writer recorded as a single JSON value; no item reads one."""
        return _MISMATCH

    @classmethod
    def of(cls: type[I], value: Any) -> I | None:
        """``value`` as this item: as it is when it already is one, read from a dict, else None."""
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        return None

    @classmethod
    def list_of(cls: type[I], value: Any) -> list[I]:
        """The items of a record's list; entries that are not objects are left out."""
        if not isinstance(value, list):
            return []
        key = (cls, id(value))
        with _LOCK:
            hit = _READ.get(key)
            if hit is not None and hit[0] is value and hit[1] == value:
                _READ.move_to_end(key)
                return list(typing.cast(tuple[I, ...], hit[2]))
        items = [cls.from_dict(v) for v in value if isinstance(v, Mapping)]
        with _LOCK:
            _READ[key] = (value, copy.deepcopy(value), tuple(items))
            while len(_READ) > _READ_MAX:
                _READ.popitem(last=False)
        return items

    def has(self, key: str) -> bool:
        """Whether the record held ``key`` with a value of its type (not a default)."""
        return (self.present is None or key in self.present) and key not in self.extra

    def to_dict(self) -> JSON:
        """The dict the record holds: the keys the item was read with, and what ``extra`` kept."""
        out: JSON = {}
        for f, _ in _keys(type(self)):
            if self.present is None or f.name in self.present:
                out[f.name] = _write(getattr(self, f.name))
        out.update(self.extra)
        return out

    def to_value(self) -> Any:
        """The JSON value the item is in the record (a dict, unless read from a scalar)."""
        return self.to_dict()


# -- a config's rate and latency ------------------------------------------------------------


@dataclass(frozen=True)
class Spread(Item):
    """A rate over repeats: the median and the range of the repeats (``samples_per_s``)."""

    median: float | None = None
    min: float | None = None
    max: float | None = None
    # An older writer's single number instead of a spread (read as the median).
    scalar: bool = _internal(default=False)

    @classmethod
    def from_scalar(cls, value: Any) -> Spread | object:
        if _is_number(value):
            return cls(median=value, scalar=True)
        return _MISMATCH

    def to_value(self) -> Any:
        return self.median if self.scalar else self.to_dict()


@dataclass(frozen=True)
class BatchMs(Item):
    """The steady-state wait for a batch, in ms (a trial records p50 and p95 only)."""

    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None


def _config() -> JSON:
    return {}


@dataclass(frozen=True)
class BenchResult(Item):
    """One config the sweep measured (``results``), or one that failed (``error``, no figures)."""

    config: JSON = field(default_factory=_config)
    label: str | None = None
    samples_per_s: Spread | None = None
    batches_per_s: Spread | None = None
    tokens_per_s: Spread | None = None
    startup_s: float | None = None
    batch_ms: BatchMs | None = None
    batch_ms_histogram: JSON | None = None
    efficiency: float | None = None
    speedup: float | None = None
    noise: float | None = None
    repeats: int | None = None
    samples_per_s_repeats: tuple[float, ...] = ()
    window_s: float | None = None
    batches_measured: int | None = None
    samples_measured: int | None = None
    resources: JSON | None = None
    error: str | None = None
    main_ms_per_batch: float | None = None
    cpu_ms_per_sample: float | None = None
    duplicates: JSON | None = None
    startup_included: bool = False
    epoch_samples: int | None = None  # one whole epoch, where a measurement saw one
    restart_s: float | None = None  # an epoch start's cost beyond the steady state

    @property
    def rate(self) -> float | None:
        """samples/s: the median over the repeats."""
        return None if self.samples_per_s is None else self.samples_per_s.median

    @property
    def measured(self) -> bool:
        """It measured a rate and did not fail."""
        return not self.error and self.rate is not None


@dataclass(frozen=True)
class Trial(Item):
    """One measurement the tuner took (``trials``), in the phase it was taken in."""

    config: JSON = field(default_factory=_config)
    label: str | None = None
    samples_per_s: float | None = None
    phase: str | None = None
    startup_s: float | None = None
    window_s: float | None = None
    batches: int | None = None
    batch_ms: BatchMs | None = None
    rel_se: float | None = None
    worker_mb: float | None = None
    workers_mb: float | None = None
    cost_s: float | None = None
    error: str | None = None
    main_ms_per_batch: float | None = None
    cpu_ms_per_sample: float | None = None
    # An epoch's length and what an epoch start cost beyond the steady state, where the window
    # saw one (NOTE [per-epoch rate] in tuning/epoch_cost.py).
    epoch_samples: int | None = None
    epoch_batches: int | None = None
    restart_s: float | None = None


@dataclass(frozen=True)
class ConfigRate(Item):
    """A config and its rate: the tuner's ``baseline`` (the user's own loader)."""

    config: JSON = field(default_factory=_config)
    label: str | None = None
    samples_per_s: float | None = None


@dataclass(frozen=True)
class HeadToHead(Item):
    """A config that raced the pick in the final race's interleaved rounds, and why it was there."""

    config: JSON = field(default_factory=_config)
    label: str | None = None
    samples_per_s: float | None = None
    rounds: int | None = None
    role: str | None = None  # baseline | sweep-best | tuner | other


@dataclass(frozen=True)
class Skipped(Item):
    """A finalist the race did not measure or did not race on, and why."""

    label: str | None = None
    why: str | None = None


@dataclass(frozen=True)
class Best(Item):
    """The tuner's pick (``best``): its rate, the race behind it and how sure it is."""

    config: JSON = field(default_factory=_config)
    label: str | None = None
    samples_per_s: float | None = None
    speedup: float | None = None
    rounds: int | None = None
    confidence: float | None = None
    confirmed: bool | None = None
    head_to_head: tuple[HeadToHead, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    keep_baseline: bool = False
    within_pct: float | None = None
    runner_up: str | None = None
    margin: float | None = None  # the pick over the runner-up
    margin_interval: tuple[float, ...] | None = None
    gain_interval: tuple[float, ...] | None = None  # the pick over the user's loader, by round
    tie: bool = False
    tie_margin: float | None = None

    def raced(self, role: str) -> HeadToHead | None:
        """The race's entry of ``role`` (``baseline``: the user's loader), if it raced."""
        return next((h for h in self.head_to_head if h.role == role), None)


# -- stages -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage(Item):
    """One stage of a sample's path (``stages``): its time per sample and share of the total."""

    name: str = "?"
    kind: str | None = None
    ms_per_sample: float | None = None
    share: float | None = None  # a fraction of the stages' total (a percentage in older records)
    where: str | None = None  # the process it ran in
    random: bool = False
    p50_ms: float | None = None
    p90_ms: float | None = None
    parent: str | None = None  # a call broken out of another stage
    doubtful: str | bool | None = None  # why its time is not counted (NOTE [stages add up])


@dataclass(frozen=True)
class Hotspot(Item):
    """One of the slowest functions of ``__getitem__`` (cProfile, ``hotspots``)."""

    function: str = "?"
    file: str = "?"
    line: int | None = None
    calls: int | None = None
    total_ms: float | None = None
    cumulative_ms: float | None = None
    ms_per_sample: float | None = None


# -- code changes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CodeChange(Item):
    """A code change applied inside the probes (``code_changes``) and how it raced the pick."""

    id: str = "?"
    title: str | None = None  # the id where a record has none
    speedup: float | None = None  # over the pick, paired by round
    speedup_interval: tuple[float, ...] | None = None
    rounds: int | None = None
    samples_per_s: float | None = None
    pick_samples_per_s: float | None = None
    diff: str | None = None
    apply: str | None = None  # how to apply it (patch -p0 …)
    description: str = ""
    verified: bool | None = None
    unverified_reason: str | None = None
    side_effect: JSON = field(default_factory=dict)  # what it alters: alters_output, summary, …
    error: str | None = None


# -- the tuner's search -------------------------------------------------------------------------


@dataclass(frozen=True)
class Region(Item):
    """How the tuner read the fetch (latency-bound, CPU-bound, …) and why."""

    name: str | None = None
    reason: str | None = None
    predicted_workers: float | None = None


@dataclass(frozen=True)
class Effect(Item):
    """A knob's measured effect: ``variant`` against ``parent`` in the same run and phase."""

    knob: str | None = None
    parent: str | None = None
    variant: str | None = None
    parent_samples_per_s: float | None = None
    variant_samples_per_s: float | None = None
    gain: float | None = None
    source: str | None = None  # scan (single measurements) | confirm (interleaved medians)


@dataclass(frozen=True)
class PersistentWorkers(Item):
    """The epoch-boundary gap measured without and with persistent workers."""

    measured_on: str | None = None
    gap_without_s: float | None = None
    gap_with_s: float | None = None
    saved_s: float | None = None
    boundaries: int | None = None
    batches_per_epoch: int | None = None
    recommended: bool | None = None
    error: str | None = None


@dataclass(frozen=True)
class Search(Item):
    """What the tuner's search saw (``search``): the region, the race, knob effects, the plan."""

    region: Region | None = None
    finalists: JSON = field(default_factory=dict)  # label -> median rate in the race
    notes: tuple[str, ...] = ()
    rounds: int | None = None
    noise: float | None = None  # a config's measurements within one race round: median spread
    startup_s: float | None = None
    effects: tuple[Effect, ...] = ()
    memory: JSON | None = None
    plan: JSON | None = None  # what the budget fits; ``summary`` says it in words
    persistent_workers: PersistentWorkers | None = None
    noisy_tie: JSON | None = None
    space: JSON | None = None  # the knobs searched; ``cores``
    profile: JSON | None = None  # the in-process profile; ``cpu_per_wall``
    batched_fetch: JSON | None = None
    epochs: JSON | None = None  # the epoch and each raced config's rate per epoch; ``decides``


# -- checks and profiles -----------------------------------------------------------------------


@dataclass(frozen=True)
class Finding(Item):
    """A check's finding: its stable code, severity, one sentence, the numbers and the fix."""

    code: str = "unknown"
    severity: str = "info"
    message: str = ""
    evidence: JSON = field(default_factory=dict)
    fix: str = ""


@dataclass(frozen=True)
class WindowWorker(Item):
    """One worker's memory at a window's end."""

    worker: int | None = None
    rss_mb: float | None = None
    anon_mb: float | None = None  # RSS less mapped files and shared memory
    uss_mb: float | None = None
    dirty_mb: float | None = None  # the private pages it wrote (Private_Dirty)


@dataclass(frozen=True)
class Window(Item):
    """One time window of a profiled run: its steps, data wait and the processes' resources."""

    index: int | None = None
    start_s: float | None = None
    end_s: float | None = None
    first_step: int | None = None
    end_step: int | None = None
    end_samples: int | None = None
    total_steps: int | None = None
    steps: int | None = None
    stall_fraction: float | None = None
    data_wait_s: float | None = None
    data_ms_mean: float | None = None
    step_ms_p50: float | None = None
    step_ms_p95: float | None = None
    steps_per_s: float | None = None
    partial: bool = False
    main_cpu_percent: float | None = None
    workers_cpu_percent: float | None = None
    main_rss_mb: float | None = None
    main_anon_mb: float | None = None  # RSS less mapped files and shared memory
    workers_rss_mb: float | None = None
    worker_uss_mb: float | None = None
    workers: tuple[WindowWorker, ...] = ()

    def worker(self, k: int) -> WindowWorker:
        """Worker ``k``'s memory (no figures where the window has no such worker)."""
        return self.workers[k] if k < len(self.workers) else WindowWorker()


# -- readers of a record dict ------------------------------------------------------------------


def results_of(r: Mapping[str, Any]) -> list[BenchResult]:
    """The bench sweep's results (``results``)."""
    return BenchResult.list_of(r.get("results"))


def trials_of(r: Mapping[str, Any]) -> list[Trial]:
    """The tuner's trials (``trials``), in order."""
    return Trial.list_of(r.get("trials"))


def best_of(r: Mapping[str, Any]) -> Best | None:
    """The tuner's pick (``best``)."""
    return Best.of(r.get("best"))


def baseline_of(r: Mapping[str, Any]) -> ConfigRate | None:
    """The user's own config and its rate as the tuner measured it (``baseline``)."""
    return ConfigRate.of(r.get("baseline"))


def stages_of(r: Mapping[str, Any]) -> list[Stage]:
    """The stage breakdown's rows (``stages``)."""
    return Stage.list_of(r.get("stages"))


def hotspots_of(r: Mapping[str, Any]) -> list[Hotspot]:
    """The slowest functions cProfile found (``hotspots``)."""
    return Hotspot.list_of(r.get("hotspots"))


def code_changes_of(r: Mapping[str, Any]) -> list[CodeChange]:
    """The code changes raced against the pick (``code_changes``)."""
    return CodeChange.list_of(r.get("code_changes"))


def search_of(r: Mapping[str, Any]) -> Search:
    """The tuner's search (``search``); an empty one where the record has none."""
    return Search.of(r.get("search")) or Search()


def findings_of(r: Mapping[str, Any]) -> list[Finding]:
    """The check's findings (``findings``)."""
    return Finding.list_of(r.get("findings"))


def windows_of(r: Mapping[str, Any]) -> list[Window]:
    """The profiled run's time windows (``windows``)."""
    return Window.list_of(r.get("windows"))


__all__ = [
    "BatchMs",
    "BenchResult",
    "Best",
    "CodeChange",
    "ConfigRate",
    "Effect",
    "Finding",
    "HeadToHead",
    "Hotspot",
    "Item",
    "PersistentWorkers",
    "Region",
    "Search",
    "Skipped",
    "Spread",
    "Stage",
    "Trial",
    "Window",
    "WindowWorker",
    "baseline_of",
    "best_of",
    "code_changes_of",
    "findings_of",
    "hotspots_of",
    "results_of",
    "search_of",
    "stages_of",
    "trials_of",
    "windows_of",
]
