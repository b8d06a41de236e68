"""Where a sample's time goes: per-stage costs measured inside the workers (SPEC §3.4).

``ss.stages(target)`` and ``stallscope stages TARGET`` report, per sample:
read/IO, decode, every transform of the dataset's composed pipeline by name,
the rest of ``__getitem__``, collate, the worker→main transfer (serialise,
queue, deserialise), and with CUDA the pin and host→device copies; the
augmentation overhead (the random transforms' cost, cross-checked by running
the pipeline with and without them); the top ``__getitem__`` hot spots
(cProfile); and, when allowed to drop the files from the page cache, the split
between fetching from storage and preparing on the CPU.

How stages are timed inside the workers: NOTE [stage timing] in ``breakdown/recorder.py``.
"""

from __future__ import annotations

import builtins
import contextlib
import cProfile
import io
import math
import os
import pstats
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..errors import PipelineError, UsageError, describe_exception
from ..pipeline.transforms import TransformSlot, find_transforms, substitute_all
from .recorder import (  # noqa: F401  (public: ss.stage)
    COLLATE,
    DECODE,
    OTHER,
    READ,
    InstrumentedDataset,
    InstrumentedIterableDataset,
    SkippedTransform,
    StageBatch,
    StageMarker,
    TimedCollate,
    TimedTransform,
    known_calls_timed,
    stage,
)

SERIALISE = "transfer: serialise"
QUEUE = "transfer: queue"
DESERIALISE = "transfer: deserialise"
PIN = "pin"
H2D = "host→device"

# Where each kind of stage runs, for the record's "where" key.
_WHERE = {
    "read": "worker",
    "decode": "worker",
    "user": "worker",
    "transform": "worker",
    "other": "worker",
    "collate": "worker",
    "serialise": "worker",
    "queue": "worker→main",
    "deserialise": "main",
    "pin": "main",
    "h2d": "main",
}

ProgressFn = Callable[[str, float], None]


# -- results ---------------------------------------------------------------------------


@dataclass
class StageTime:
    name: str
    ms_per_sample: float
    share: float
    kind: str  # read | decode | user | transform | other | collate | serialise | queue | deserialise | pin | h2d
    where: str  # worker | worker→main | main
    random: bool = False
    p50_ms: float | None = None  # per-sample percentiles, over the samples the stage ran in
    p90_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AugmentationOverhead:
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Hotspot:
    function: str
    file: str
    line: int
    calls: int
    total_ms: float
    cumulative_ms: float
    ms_per_sample: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StorageSplit:
    """Cold vs warm page cache: fetching from storage vs preparing on the CPU."""

    files: int
    bytes: int
    samples: int
    warm_ms_per_sample: float
    cold_ms_per_sample: float
    fetch_ms_per_sample: float
    prepare_ms_per_sample: float
    fetch_share: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StageRun:
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        return sum(s.ms_per_sample for s in self.stages)

    def stage(self, name: str) -> StageTime:
        for item in self.stages:
            if item.name == name:
                return item
        raise KeyError(name)

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


# -- analysis: raw totals -> the stage table (pure) -------------------------------------


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


def build_stage_table(
    raw: RawStageTotals,
    transforms: Sequence[str],
    random_transforms: Sequence[str] = (),
) -> list[StageTime]:
    """Per-sample ms and shares, in pipeline order: read, decode, user stages, transforms,
    other, collate, transfer, pin, host→device. Shares add up to 1."""
    per_sample = 1000.0 / max(1, raw.samples)
    seconds = dict(raw.stage_seconds)
    rows: list[tuple[str, float, str]] = []

    def take(name: str, kind: str, *, always: bool = False) -> None:
        if name in seconds or always:
            rows.append((name, seconds.pop(name, 0.0) * per_sample, kind))

    take(READ, "read")
    take(DECODE, "decode")
    transform_set = set(transforms)
    for name in [n for n in list(seconds) if n not in transform_set and n not in (OTHER, COLLATE)]:
        take(name, "user")
    for name in transforms:
        take(name, "transform", always=True)
    take(OTHER, "other")
    take(COLLATE, "collate")
    if raw.transfer:
        rows.append((SERIALISE, raw.transfer.get("serialise_cpu", 0.0) * per_sample, "serialise"))
        rows.append((QUEUE, raw.transfer.get("queue", 0.0) * per_sample, "queue"))
        rows.append((DESERIALISE, raw.transfer.get("deserialise", 0.0) * per_sample, "deserialise"))
    if PIN in raw.main_seconds:
        rows.append((PIN, raw.main_seconds[PIN] * per_sample, "pin"))
    if H2D in raw.main_seconds:
        rows.append((H2D, raw.main_seconds[H2D] * per_sample, "h2d"))
    total = sum(ms for _, ms, _ in rows)
    random_set = set(random_transforms)
    return [
        StageTime(
            name=name,
            ms_per_sample=ms,
            share=(ms / total) if total > 0 else 0.0,
            kind=kind,
            where=_WHERE[kind],
            random=name in random_set,
            p50_ms=_percentile_ms(raw.sample_times.get(name), 50),
            p90_ms=_percentile_ms(raw.sample_times.get(name), 90),
        )
        for name, ms, kind in rows
    ]


def _percentile_ms(values: Sequence[float] | None, q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return 1000.0 * (ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def transfer_summary(raw: RawStageTotals) -> dict[str, Any] | None:
    """Per-batch transfer latencies (ms) and the mean batch size in bytes."""
    if not raw.transfer or raw.batches == 0:
        return None
    per_batch = 1000.0 / raw.batches
    return {
        "batches": raw.batches,
        "batch_bytes": raw.batch_bytes // max(1, raw.batches),
        "serialise_ms_per_batch": raw.transfer.get("serialise_cpu", 0.0) * per_batch,
        "serialise_wall_ms_per_batch": raw.transfer.get("serialise_wall", 0.0) * per_batch,
        "handoff_ms_per_batch": raw.transfer.get("handoff", 0.0) * per_batch,
        "queue_ms_per_batch": raw.transfer.get("queue", 0.0) * per_batch,
        "deserialise_ms_per_batch": raw.transfer.get("deserialise", 0.0) * per_batch,
    }


def augmentation_from_stages(
    table: Sequence[StageTime],
    augmentations: Sequence[str],
    source: str,
) -> AugmentationOverhead | None:
    """The random transforms' share of the per-sample cost, from the stage table."""
    if not augmentations:
        return None
    wanted = set(augmentations)
    aug_ms = sum(s.ms_per_sample for s in table if s.name in wanted)
    total = sum(s.ms_per_sample for s in table)
    without = total - aug_ms
    percent = 100.0 * aug_ms / without if without > 0 else math.inf
    return AugmentationOverhead(
        ms_per_sample=aug_ms, percent=percent, transforms=list(augmentations), source=source
    )


def choose_augmentations(
    slots: Sequence[TransformSlot],
    *,
    augmentations: Sequence[str] | None = None,
    baseline_transforms: Sequence[str] | None = None,
) -> tuple[list[str], str]:
    """Names of the transforms counted as augmentation, and whether they were detected or given.

    ``augmentations`` names them directly; ``baseline_transforms`` names the ones the
    baseline keeps (everything else is augmentation). Names match a stage name or a
    class name, case-insensitively.
    """
    if augmentations and baseline_transforms:
        raise UsageError("give either --augmentations or --baseline-transforms, not both.")
    if augmentations is not None or baseline_transforms is not None:
        given = list(augmentations if augmentations is not None else baseline_transforms or [])
        matched = _match_names(slots, given)
        if baseline_transforms is not None:
            return [s.name for s in slots if s.name not in matched], "given"
        return [s.name for s in slots if s.name in matched], "given"
    return [s.name for s in slots if s.random], "detected"


def _match_names(slots: Sequence[TransformSlot], names: Sequence[str]) -> set[str]:
    matched: set[str] = set()
    for wanted in names:
        key = wanted.strip().lower()
        hits = {
            s.name
            for s in slots
            if s.name.lower() == key or s.name.split(" #")[0].split(".")[-1].lower() == key
        }
        if not hits:
            available = ", ".join(s.name for s in slots) or "none found"
            raise UsageError(
                f"no transform named {wanted!r} in the pipeline (transforms: {available})."
            )
        matched |= hits
    return matched


# -- probes ------------------------------------------------------------------------------


def default_stage_workers() -> int:
    """Fewer workers than cores, so per-stage wall times are not inflated by workers
    competing for a core: 1 on a 2-core machine, up to 4."""
    from ..runtime.host import usable_cores

    return max(1, min(4, usable_cores() // 2))


def instrument_pipeline(pipeline: Any, slots: Sequence[TransformSlot]) -> Any:
    """A copy of ``pipeline`` whose dataset, transforms and collate record stage times."""
    dataset = substitute_all(
        pipeline.dataset, slots, lambda slot: TimedTransform(slot.name, slot.obj)
    )
    if pipeline.is_iterable:
        wrapped: Any = InstrumentedIterableDataset(dataset)
    else:
        wrapped = InstrumentedDataset(dataset)
    return replace(pipeline, dataset=wrapped, collate_fn=TimedCollate(pipeline.collate))


def measure_worker_stages(
    pipeline: Any,
    slots: Sequence[TransformSlot],
    *,
    num_workers: int,
    samples: int,
    max_seconds: float,
    start_method: str | None = None,
    device: str | None = None,
    warmup_batches: int = 1,
    timeout: float = 60.0,
    progress: ProgressFn | None = None,
) -> tuple[RawStageTotals, StageRun]:
    """Run the instrumented pipeline through a real DataLoader and sum the stage times."""
    from ..config import LoaderConfig
    from ..pipeline.loaders import CyclingSampler, build_loader
    from ..runtime.processes import (
        describe_worker_death,
        is_worker_death,
        no_orphans,
        shutdown_iterator,
        stop_workers,
    )
    from ..target import nbytes

    instrumented = instrument_pipeline(pipeline, slots)
    bs = pipeline.batch_size
    config = LoaderConfig(
        num_workers=num_workers,
        batch_size=bs,
        prefetch_factor=2 if num_workers else None,
        multiprocessing_context=start_method if num_workers else None,
    )
    warm_batches_total = warmup_batches * max(1, num_workers)
    wanted_batches = warm_batches_total + max(1, math.ceil(samples / bs))
    sampler = None
    length = pipeline.length()
    if not pipeline.is_iterable and length:
        sampler = CyclingSampler(length, wanted_batches * bs, shuffle=pipeline.shuffle)
    loader = build_loader(
        instrumented,
        config,
        sampler=sampler,
        timeout=timeout if num_workers else 0.0,
        drop_last=False,
    )
    cuda = _cuda_device(device)
    raw = RawStageTotals(stage_seconds={}, samples=0, batches=0)
    seen: dict[int, int] = {}
    warmup: list[StageBatch] = []
    started = time.perf_counter()
    deadline = started + max_seconds
    iterator = None
    patch = known_calls_timed() if num_workers == 0 else contextlib.nullcontext()
    if progress is not None:
        progress("stage times in workers", 0.0)
    with no_orphans(), patch:
        try:
            iterator = iter(loader)
            for received in iterator:
                if not isinstance(received, StageBatch):
                    raise PipelineError(
                        "the DataLoader changed the batch type on its way to the main process."
                    )
                main_times = _to_device(received.batch, cuda) if cuda is not None else {}
                if seen.get(received.worker, 0) < warmup_batches:
                    seen[received.worker] = seen.get(received.worker, 0) + 1
                    warmup.append(received)
                    continue
                _accumulate(raw, received, main_times, nbytes(received.batch))
                if progress is not None:
                    progress("stage times in workers", min(1.0, raw.samples / max(1, samples)))
                if raw.samples >= samples or time.perf_counter() > deadline:
                    break
        except PipelineError:
            raise
        except Exception as exc:
            dead = stop_workers(iterator, exc)  # NOTE [worker death]
            if dead or is_worker_death(exc):
                raise PipelineError(describe_worker_death(dead, " while its stages were timed", exc)) from exc
            raise PipelineError(
                f"the pipeline failed while its stages were timed: {describe_exception(exc)}."
            ) from exc
        finally:
            shutdown_iterator(iterator)
            del iterator
    if raw.samples == 0:
        # A short iterable dataset ended during warm-up: use what there is.
        for received in warmup:
            _accumulate(raw, received, {}, nbytes(received.batch))
        warmup = []
    run = StageRun(
        num_workers=num_workers,
        batch_size=bs,
        start_method=effective_start_method(start_method, num_workers),
        device=str(cuda) if cuda is not None else None,
        samples=raw.samples,
        batches=raw.batches,
        warmup_batches=len(warmup),
        seconds=time.perf_counter() - started,
        transforms_found=len(slots),
    )
    return raw, run


def effective_start_method(requested: str | None, num_workers: int) -> str | None:
    """The start method workers get: the one asked for, the one set, or the platform default."""
    from ..runtime.processes import default_start_method

    if num_workers == 0:
        return None
    return requested or default_start_method()


def _accumulate(
    raw: RawStageTotals, received: StageBatch, main_times: dict[str, float], batch_bytes: int
) -> None:
    for name, seconds in received.times.items():
        raw.stage_seconds[name] = raw.stage_seconds.get(name, 0.0) + seconds
    for name, values in received.sample_times.items():
        raw.sample_times.setdefault(name, []).extend(values)
    raw.samples += received.samples
    per_sample = 1.0 / max(1, received.samples)
    raw.batches += 1
    raw.batch_bytes += batch_bytes
    if received.transfer is not None:
        for key, value in asdict(received.transfer).items():
            raw.transfer[key] = raw.transfer.get(key, 0.0) + value
        for name, key in (
            (SERIALISE, "serialise_cpu"),
            (QUEUE, "queue"),
            (DESERIALISE, "deserialise"),
        ):
            raw.sample_times.setdefault(name, []).append(
                getattr(received.transfer, key) * per_sample
            )
    for name, seconds in main_times.items():
        raw.main_seconds[name] = raw.main_seconds.get(name, 0.0) + seconds
        raw.sample_times.setdefault(name, []).append(seconds * per_sample)


def _cuda_device(device: str | None) -> Any:
    """The CUDA device to time pin and host→device copies on, or None (no CUDA, or 'cpu')."""
    if device in (None, "cpu", "none"):
        return None
    import torch

    if device == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else None
    chosen = torch.device(device)
    if chosen.type != "cuda":
        return None
    if not torch.cuda.is_available():
        raise UsageError(f"--device {device} was asked for but CUDA is not available here.")
    return chosen


def _to_device(batch: Any, device: Any) -> dict[str, float]:
    """Pin the batch, then copy it to ``device``, timing both (synchronised: copies are async)."""
    import torch
    from torch.utils.data._utils.pin_memory import pin_memory

    start = time.perf_counter()
    pinned = pin_memory(batch)
    pinned_at = time.perf_counter()
    _move(pinned, device)
    torch.cuda.synchronize(device)
    done = time.perf_counter()
    return {PIN: pinned_at - start, H2D: done - pinned_at}


def _move(obj: Any, device: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, dict):
        return {k: _move(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_move(v, device) for v in obj]
    return obj


@contextlib.contextmanager
def _single_torch_thread() -> Iterator[None]:
    """In-process runs use one intra-op thread, as DataLoader workers do."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _spread_indices(length: int, count: int) -> list[int]:
    """``count`` indices spread over the dataset (cycling when it is shorter)."""
    if count <= length:
        return [int(i * length / count) for i in range(count)]
    return [i % length for i in range(count)]


def _fetcher(dataset: Any, is_iterable: bool) -> Callable[[Sequence[int]], int]:
    """A function fetching the given indices (or as many items of an iterable) in-process."""
    if is_iterable:
        state: dict[str, Any] = {"it": iter(dataset)}

        def fetch_iterable(indices: Sequence[int]) -> int:
            fetched = 0
            for _ in indices:
                try:
                    next(state["it"])
                except StopIteration:
                    state["it"] = iter(dataset)
                    next(state["it"])
                fetched += 1
            return fetched

        return fetch_iterable

    def fetch_map(indices: Sequence[int]) -> int:
        for index in indices:
            dataset[index]
        return len(indices)

    return fetch_map


def measure_augmentation_differential(
    pipeline: Any,
    slots: Sequence[TransformSlot],
    augmentations: Sequence[str],
    *,
    samples: int = 160,
    max_seconds: float = 6.0,
    rounds: int = 8,
    progress: ProgressFn | None = None,
) -> tuple[float, float, int]:
    """Per-sample ``__getitem__`` ms with and without the augmentations, in-process,
    interleaved A B B A … so drift hits both alike. Each figure is the median over
    rounds, so one round hit by a stall elsewhere on the machine does not move it.
    Returns (with, without, samples each)."""
    wanted = set(augmentations)
    without = substitute_all(
        pipeline.dataset, [s for s in slots if s.name in wanted], lambda s: SkippedTransform(s.name)
    )
    length = pipeline.length() or samples
    per_round = max(4, samples // rounds)
    indices = _spread_indices(length, per_round * rounds)
    fetch_with = _fetcher(pipeline.dataset, pipeline.is_iterable)
    fetch_without = _fetcher(without, pipeline.is_iterable)
    per_sample: dict[str, list[float]] = {"with": [], "without": []}
    counts = {"with": 0, "without": 0}
    deadline = time.perf_counter() + max_seconds
    with _single_torch_thread():
        fetch_with(indices[:2])  # warm caches and lazy imports outside the clock
        fetch_without(indices[:2])
        for number in range(rounds):
            chunk = indices[number * per_round : (number + 1) * per_round]
            order = (("with", fetch_with), ("without", fetch_without))
            for label, fetch in order if number % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                fetched = fetch(chunk)
                elapsed = time.perf_counter() - start
                counts[label] += fetched
                per_sample[label].append(1000.0 * elapsed / max(1, fetched))
            if progress is not None:
                progress("augmentation with vs without", (number + 1) / rounds)
            if time.perf_counter() > deadline and number >= 1:
                break
    return (
        statistics.median(per_sample["with"]),
        statistics.median(per_sample["without"]),
        counts["with"],
    )


def profile_hotspots(
    pipeline: Any,
    *,
    samples: int = 128,
    max_seconds: float = 4.0,
    top: int = 10,
    progress: ProgressFn | None = None,
) -> tuple[list[Hotspot], int]:
    """cProfile over ``__getitem__`` of up to ``samples`` items in-process; the top
    functions by own (total) time."""
    length = pipeline.length() or samples
    indices = _spread_indices(length, samples)
    fetch = _fetcher(pipeline.dataset, pipeline.is_iterable)
    profiler = cProfile.Profile()
    done = 0
    deadline = time.perf_counter() + max_seconds
    with _single_torch_thread():
        fetch(indices[:1])
        for start in range(0, len(indices), 16):
            profiler.enable()
            try:
                done += fetch(indices[start : start + 16])
            finally:
                profiler.disable()
            if progress is not None:
                progress("__getitem__ hot spots", done / len(indices))
            if time.perf_counter() > deadline:
                break
    return hotspots_from_stats(pstats.Stats(profiler).stats, done, top), done  # type: ignore[attr-defined]


def hotspots_from_stats(stats: dict[Any, Any], samples: int, top: int) -> list[Hotspot]:
    """Pure: pstats' raw table -> the top functions by own time."""
    rows = []
    for (filename, line, function), (_, calls, own, cumulative, _) in stats.items():
        if "_lsprof.Profiler" in function:
            continue
        rows.append(
            Hotspot(
                function=function,
                file="<built-in>" if filename == "~" else filename,
                line=int(line),
                calls=int(calls),
                total_ms=own * 1000.0,
                cumulative_ms=cumulative * 1000.0,
                ms_per_sample=own * 1000.0 / max(1, samples),
            )
        )
    rows.sort(key=lambda h: h.total_ms, reverse=True)
    return rows[:top]


@contextlib.contextmanager
def _files_opened() -> Iterator[set[str]]:
    """Paths of the files Python's ``open()`` reads while the block runs."""
    seen: set[str] = set()
    original = builtins.open

    def tracking_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, bytes, os.PathLike)) and not any(c in mode for c in "wax+"):
            seen.add(os.path.abspath(os.fsdecode(file)))
        return original(file, mode, *args, **kwargs)

    builtins.open = tracking_open
    io_open = io.open
    io.open = tracking_open  # type: ignore[assignment]
    try:
        yield seen
    finally:
        builtins.open = original
        io.open = io_open  # type: ignore[assignment]


def drop_from_page_cache(paths: Sequence[str]) -> int:
    """Ask the kernel to forget the cached pages of ``paths``; returns how many it was asked for."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        raise UsageError(
            "--drop-cache needs os.posix_fadvise, which this platform lacks (it is Linux-only)."
        )
    dropped = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            dropped += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return dropped


def measure_storage_split(
    pipeline: Any,
    *,
    samples: int = 128,
    progress: ProgressFn | None = None,
) -> StorageSplit | None:
    """Differential run (as DS-Analyzer does): the same samples with the files in the page
    cache (warm: CPU preparation only) and after dropping them (cold: + fetch from storage)."""
    if pipeline.is_iterable:
        return None
    length = pipeline.length() or samples
    indices = _spread_indices(
        length, min(samples, length)
    )  # each file once per pass: no re-warming
    fetch = _fetcher(pipeline.dataset, False)
    with _single_torch_thread():
        with _files_opened() as files:
            fetch(indices)  # discovers the files and warms the cache
        if progress is not None:
            progress("cold vs warm page cache", 0.3)
        paths = sorted(p for p in files if os.path.isfile(p))
        if not paths:
            return None
        start = time.perf_counter()
        fetch(indices)
        warm = time.perf_counter() - start
        drop_from_page_cache(paths)
        if progress is not None:
            progress("cold vs warm page cache", 0.6)
        start = time.perf_counter()
        fetch(indices)
        cold = time.perf_counter() - start
    if progress is not None:
        progress("cold vs warm page cache", 1.0)
    count = len(indices)
    warm_ms, cold_ms = 1000.0 * warm / count, 1000.0 * cold / count
    fetch_ms = max(0.0, cold_ms - warm_ms)
    return StorageSplit(
        files=len(paths),
        bytes=sum(os.path.getsize(p) for p in paths),
        samples=count,
        warm_ms_per_sample=warm_ms,
        cold_ms_per_sample=cold_ms,
        fetch_ms_per_sample=fetch_ms,
        prepare_ms_per_sample=warm_ms,
        fetch_share=fetch_ms / cold_ms if cold_ms > 0 else 0.0,
    )


# -- the library entry point -------------------------------------------------------------


def stages(
    target: Any,
    *,
    batch_size: int | None = None,
    collate: str | Callable[[list], Any] | None = None,
    num_workers: int | None = None,
    samples: int = 256,
    max_seconds: float = 15.0,
    start_method: str | None = None,
    device: str | None = "auto",
    augmentations: Sequence[str] | None = None,
    baseline_transforms: Sequence[str] | None = None,
    differential: bool = True,
    hotspots: int = 10,
    hotspot_samples: int = 200,
    drop_cache: bool = False,
    timeout: float | None = None,
    progress: ProgressFn | None = None,
) -> StagesResult:
    """Per-stage cost breakdown of a pipeline, measured inside DataLoader workers.

    ``target`` is anything :func:`stallscope.load_target` takes (or a loaded Pipeline).
    ``num_workers`` defaults to about half the usable cores (at least 1), so stage times
    are not inflated by workers competing for cores. The worker run stops after
    ``samples`` measured samples or ``max_seconds``. ``augmentations`` names the
    transforms counted as augmentation; ``baseline_transforms`` instead names those the
    baseline keeps; by default random transforms are detected by name and ``p``.
    ``hotspots=0`` skips cProfile; ``drop_cache=True`` allows dropping the dataset's
    files from the page cache to split storage fetch from CPU preparation.
    """
    from ..target import Pipeline, load_target, preflight

    pipeline = (
        target
        if isinstance(target, Pipeline)
        else load_target(target, batch_size=batch_size, collate=collate)
    )
    if num_workers is not None and num_workers < 0:
        raise UsageError(f"--num-workers must be 0 or more, not {num_workers}.")
    if samples < 1:
        raise UsageError(f"--samples must be at least 1, not {samples}.")
    slots, copy_problem = _instrumentable_transforms(pipeline.dataset)
    chosen, source = choose_augmentations(
        slots, augmentations=augmentations, baseline_transforms=baseline_transforms
    )
    check = preflight(pipeline)
    workers = default_stage_workers() if num_workers is None else num_workers
    per_batch_s = check.seconds_per_item * pipeline.batch_size
    fetch_timeout = timeout if timeout is not None else max(60.0, 20.0 * per_batch_s)
    raw, run = measure_worker_stages(
        pipeline,
        slots,
        num_workers=workers,
        samples=samples,
        max_seconds=max_seconds,
        start_method=start_method,
        device=device,
        timeout=fetch_timeout,
        progress=progress,
    )
    table = build_stage_table(raw, [s.name for s in slots], chosen)
    notes = ([copy_problem] if copy_problem else []) + _notes(slots, table)
    overhead = augmentation_from_stages(table, chosen, source)
    if overhead is not None and differential:
        with _in_process("the with/without-augmentation run"):
            with_ms, without_ms, count = measure_augmentation_differential(
                pipeline, slots, chosen, samples=min(96, max(16, samples // 2)), progress=progress
            )
        overhead.with_ms_per_sample = with_ms
        overhead.without_ms_per_sample = without_ms
        overhead.differential_ms_per_sample = with_ms - without_ms
        overhead.differential_percent = (
            100.0 * (with_ms - without_ms) / without_ms if without_ms > 0 else None
        )
        overhead.samples = count
    spots: list[Hotspot] = []
    if hotspots > 0:
        with _in_process("profiling __getitem__"):
            spots, _ = profile_hotspots(
                pipeline, samples=hotspot_samples, top=hotspots, progress=progress
            )
    storage = None
    if drop_cache:
        with _in_process("the cold vs warm page-cache run"):
            storage = measure_storage_split(pipeline, progress=progress)
    if drop_cache and storage is None:
        notes.append(
            "--drop-cache: no file reads through Python's open() were seen, so there was nothing to drop."
        )
    return StagesResult(
        stages=table,
        augmentation_overhead=overhead,
        hotspots=spots,
        run=run,
        transfer=transfer_summary(raw),
        storage=storage,
        notes=notes,
    )


def _instrumentable_transforms(dataset: Any) -> tuple[list[TransformSlot], str | None]:
    """The transforms found, if the dataset can be copied to swap them (a dry run)."""
    slots = find_transforms(dataset)
    if not slots:
        return [], None
    try:
        substitute_all(dataset, slots, lambda slot: slot.obj)
    except Exception as exc:
        return [], (
            f"the transforms were not timed one by one: copying the dataset to wrap them raised "
            f"{describe_exception(exc, 120)}; their time is in 'other (__getitem__)'."
        )
    return slots, None


@contextlib.contextmanager
def _in_process(what: str) -> Iterator[None]:
    try:
        yield
    except (UsageError, KeyboardInterrupt):
        raise
    except Exception as exc:
        raise PipelineError(
            f"the pipeline failed during {what}: {describe_exception(exc)}."
        ) from exc


def _notes(slots: Sequence[TransformSlot], table: Sequence[StageTime]) -> list[str]:
    notes: list[str] = []
    if not slots:
        notes.append(
            "no transform pipeline was found on the dataset (a Compose or list of callables in an attribute); "
            "its work is in 'other (__getitem__)'. Mark stages with `with ss.stage(NAME):`."
        )
    kinds = {s.kind for s in table}
    if "read" not in kinds and "decode" not in kinds:
        notes.append(
            "read and decode were not seen (no Pillow/numpy/torch loads, no ss.stage markers); "
            "they are part of 'other (__getitem__)'."
        )
    return notes
