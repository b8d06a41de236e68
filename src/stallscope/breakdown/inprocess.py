"""In-process runs over the user's own dataset: the with/without-augmentation differential
and the cProfile hot spots of ``__getitem__``."""

from __future__ import annotations

import contextlib
import cProfile
import pstats
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import describe_exception
from ..pipeline.transforms import TransformSlot, substitute_all
from .instrumented import SkippedTransform
from .results import Hotspot, ProgressFn


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


class SkippingBroke(Exception):
    """The dataset failed with the augmentations skipped: a later step needs what one of them
    makes (a key it sets, the fixed size it crops to), so the pipeline has no run without them."""


def _skipping(fetch: Callable[[Sequence[int]], int]) -> Callable[[Sequence[int]], int]:
    def fetch_without(indices: Sequence[int]) -> int:
        try:
            return fetch(indices)
        except Exception as exc:
            raise SkippingBroke(describe_exception(exc)) from exc

    return fetch_without


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
    Returns (with, without, samples each). Raises :class:`SkippingBroke` where the dataset fails
    only with them skipped."""
    wanted = set(augmentations)
    without = substitute_all(
        pipeline.dataset, [s for s in slots if s.name in wanted], lambda s: SkippedTransform(s.name)
    )
    length = pipeline.length() or samples
    per_round = max(4, samples // rounds)
    indices = _spread_indices(length, per_round * rounds)
    fetch_with = _fetcher(pipeline.dataset, pipeline.is_iterable)
    fetch_without = _skipping(_fetcher(without, pipeline.is_iterable))
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
