"""The memory probe's side inside the DataLoader workers: time each fetch, split heap from native
memory.

The probe wraps the user's dataset in :class:`ProbedDataset` (or
:class:`ProbedIterable`) and the collate in :class:`ProbedCollate`, so every
sample travels to the main process with a small record of what its worker saw:

- the index and how long ``dataset[index]`` took (these fetches count toward
  the check's coverage, and a sample slow in two passes is a slow sample);
- every ``every`` samples, a point ``[samples, python_heap_mb, rss_mb, t,
  tracemalloc_mb, children_mb]``: the Python heap is what ``tracemalloc``
  traces since the worker's first fetch (NumPy reports its buffers to it);
  native memory is RSS minus that and minus tracemalloc's own bookkeeping
  (C/C++ libraries, torch tensors, allocator caches), plus ``children_mb``:
  the memory of every process the worker started, at any depth (a decoder
  pool, a helper the dataset launches), each one's USS where readable, else
  its RSS (NOTE [the whole process tree] in runtime/resources.py);
- the sizes of the dataset's containers (a shallow walk of its attributes and
  theirs: lists, dicts, sets, deques, arrays), to name the one that grows;
- at a few points (``SITES_AT_POINTS``), the allocation sites (file:line) holding the most
  memory allocated since the first fetch.

Tracing starts in the worker at its first fetch, so only what the worker
allocates is traced, not the objects it inherited.

NOTE [stream epochs]
A stream that ends is iterated again, as the next epoch of a training run
would (``persistent_workers`` or a new ``iter(loader)``). Many streams hold a
per-epoch buffer (a shuffle buffer, the shard read into memory) that fills
during the epoch and is freed when it ends: within an epoch that looks like
growth, and it is not. So each worker also reads its memory at every epoch
boundary (before the first fetch, and after each epoch's end, once the
stream's generator has finished), sent as ``"b"`` with the next item; the rule
judges a stream that ended at least twice by those readings only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from torch.utils.data import Dataset, IterableDataset

from ..pipeline.structure import fetch_for_collate
from ..pipeline.threaded import own_batched_fetch

MB = 1024 * 1024
SITES_AT_POINTS = frozenset({6, 16, 32, 48, 96, 192})
TOP_SITES = 5
TRACE_FRAMES = 4  # enough to get from NumPy's Python wrappers back to the dataset's line
_CONTAINERS = (list, dict, set, frozenset, deque, bytearray)
_MAX_ATTRIBUTES = 200


def _array_types() -> tuple[type[Any], ...]:
    import numpy as np
    import torch

    return (np.ndarray, torch.Tensor)


def container_sizes(dataset: Any, *, depth: int = 2) -> dict[str, list[int]]:
    """``{"dataset.cache": [entries, bytes]}`` for the containers among the dataset's attributes.

    A shallow walk: the dataset's attributes and, ``depth`` levels down, those
    of the plain objects it holds (``dataset.transform.cache``). ``entries`` is
    ``len()``; ``bytes`` is the payload of arrays and tensors, else the
    container's own size (not what it points to).
    """
    import types

    arrays = _array_types()
    opaque = (
        type,
        types.ModuleType,
        types.FunctionType,
        types.BuiltinFunctionType,
        types.MethodType,
        str,
        bytes,
    )
    sizes: dict[str, list[int]] = {}
    stack: list[tuple[str, Any, int]] = [("dataset", dataset, 1)]
    seen: set[int] = set()
    while stack and len(sizes) < _MAX_ATTRIBUTES:
        path, obj, level = stack.pop()
        attrs = getattr(obj, "__dict__", None)
        if not isinstance(attrs, dict) or id(obj) in seen:
            continue
        seen.add(id(obj))
        for name, value in list(attrs.items()):
            child = f"{path}.{name}"
            if isinstance(value, arrays):
                entries = int(value.shape[0]) if len(value.shape) else 1
                sizes[child] = [
                    entries,
                    int(value.element_size() * value.nelement())
                    if hasattr(value, "element_size")
                    else int(value.nbytes),
                ]
            elif isinstance(value, _CONTAINERS):
                sizes[child] = [len(value), sys.getsizeof(value)]
            elif level < depth and not isinstance(value, opaque):
                stack.append((child, value, level + 1))
    return sizes


# NOTE [tracing and the allocator]
# tracemalloc's own tables grow as it traces, and glibc raises its mmap threshold to the size of
# any mmap-served block that is freed (up to 32 MiB): once a table outgrows a batch, the batches'
# tensors (8 MiB of floats for 32 rows of 64 KiB) come from the heap instead of mmap, and the
# heap keeps what they free. A worker with 8 MiB batches then grew by about 370 MiB over its first
# epoch (96 batches) before levelling off, traced, and not at all untraced: memory growth of the
# probe's own making, read as a leak. The threshold is pinned to glibc's default (128 KiB, which
# also turns its adjustment off) before tracing starts, so batches are served as in an untraced
# worker.
_M_MMAP_THRESHOLD = -3
_GLIBC_MMAP_THRESHOLD = 128 * 1024


def _pin_mmap_threshold() -> None:
    """Pin glibc's mmap threshold (NOTE [tracing and the allocator]); nothing elsewhere."""
    import ctypes

    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        mallopt = ctypes.CDLL(None).mallopt
        mallopt(_M_MMAP_THRESHOLD, _GLIBC_MMAP_THRESHOLD)


class _WorkerState:
    """Per worker process: created at the first fetch there."""

    def __init__(self, dataset: Any) -> None:
        import psutil

        self.pid = os.getpid()
        self.proc = psutil.Process()
        self.count = 0
        self.points = 0
        self.t0 = time.perf_counter()
        if not tracemalloc.is_tracing():
            _pin_mmap_threshold()
            tracemalloc.start(TRACE_FRAMES)
        self.containers_start = container_sizes(dataset)

    def reading(self) -> list[float]:
        """``[samples, python_heap_mb, rss_mb, t, tracemalloc_mb, children_mb, mapped_mb]`` now;
        ``mapped_mb``: the part of the RSS that is pages of files and shared memory (a memory-mapped
        dataset's file read through: page cache the kernel can drop, no leak)."""
        from ..runtime.processes import descendants, own_memory_mb

        heap, _ = tracemalloc.get_traced_memory()
        try:
            info = self.proc.memory_info()
            rss, mapped = info.rss, getattr(info, "shared", 0)
        except Exception:  # psutil.Error: /proc unreadable
            rss = mapped = 0
        children = own_memory_mb(descendants(self.proc))["own_mb"]
        return [
            self.count,
            round(heap / MB, 3),
            round(rss / MB, 3),
            round(time.perf_counter() - self.t0, 3),
            round(tracemalloc.get_tracemalloc_memory() / MB, 3),
            round(children, 3),
            round(mapped / MB, 3),
        ]

    def point(self, dataset: Any) -> dict[str, Any]:
        self.points += 1
        report: dict[str, Any] = {"p": self.reading(), "containers": container_sizes(dataset)}
        if self.points == 1:
            report["containers_start"] = self.containers_start
        if self.points in SITES_AT_POINTS:
            report["sites"] = self.sites()  # a snapshot costs tens of ms or more: a few, spread out
        return report

    def sites(self) -> list[list[Any]]:
        """Where memory allocated since the first fetch (still alive) came from: ``[file:line, MB,
        blocks, caller]``.

        ``caller`` is the innermost frame outside the standard library and
        installed packages: the dataset's line that called ``np.full``.
        """
        from .stacks import is_library

        snapshot = tracemalloc.take_snapshot().filter_traces(
            (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__))
        )
        grouped: dict[tuple[str, str | None], list[float]] = {}
        for stat in snapshot.statistics("traceback"):
            frames = list(stat.traceback)  # oldest first
            where = f"{frames[-1].filename}:{frames[-1].lineno}"
            user = next(
                (f for f in reversed(frames) if not is_library(f.filename, packages=True)), None
            )
            caller = None if user is None else f"{user.filename}:{user.lineno}"
            entry = grouped.setdefault((where, caller), [0.0, 0])
            entry[0] += stat.size
            entry[1] += stat.count
        top = sorted(grouped.items(), key=lambda kv: kv[1][0], reverse=True)[:TOP_SITES]
        return [
            [where, round(size / MB, 3), int(count), caller]
            for (where, caller), (size, count) in top
        ]


_STATE: dict[int, _WorkerState] = {}


def _state(dataset: Any) -> _WorkerState:
    state = _STATE.get(os.getpid())  # keyed by pid: a forked child must not reuse its parent's
    if state is None:
        state = _STATE[os.getpid()] = _WorkerState(dataset)
    return state


def _worker_id() -> int:
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return info.id if info is not None else 0


def _record(dataset: Any, index: Any, seconds: float, every: int) -> dict[str, Any]:
    state = _state(dataset)
    state.count += 1
    meta: dict[str, Any] = {"w": _worker_id(), "pid": state.pid, "i": index, "s": seconds}
    if state.count == 1 or state.count % every == 0:
        meta.update(state.point(dataset))
    return meta


class ProbedDataset(Dataset[Any]):
    """The user's map-style dataset, each item paired with its worker's record (see the module
    docstring)."""

    def __init__(self, dataset: Any, every: int) -> None:
        self.dataset = dataset
        self.every = max(1, every)
        if not own_batched_fetch(dataset):
            # torch fetches item by item where the user's dataset does: it checks the attribute,
            # so the method is shadowed per instance on purpose.
            self.__getitems__ = None  # type: ignore[method-assign,assignment]

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Any, dict[str, Any]]:
        _state(self.dataset)  # tracing starts before the first fetch, so it is counted
        start = time.perf_counter()
        item = self.dataset[index]
        return item, _record(self.dataset, index, time.perf_counter() - start, self.every)

    def __getitems__(self, indices: list[Any]) -> FetchedBatch:
        """A batch as torch fetches it from a dataset with its own ``__getitems__``, each index
        with its record (the batch's time shared out)."""
        _state(self.dataset)
        start = time.perf_counter()
        batch = fetch_for_collate(self.dataset, indices)
        seconds = (time.perf_counter() - start) / max(1, len(indices))
        return FetchedBatch(batch, [_record(self.dataset, i, seconds, self.every) for i in indices])


class FetchedBatch(NamedTuple):
    """What the user's ``__getitems__`` returned for a batch (its collate's input), and the
    records of its indices."""

    batch: Any
    records: list[dict[str, Any]]


class ProbedIterable(IterableDataset[Any]):
    """The user's iterable dataset, each item paired with its worker's record; iterated again
    when it ends, with a memory reading at every epoch boundary (NOTE [stream epochs])."""

    def __init__(self, dataset: Any, every: int, max_epochs: int = 50) -> None:
        self.dataset = dataset
        self.every = max(1, every)
        self.max_epochs = max_epochs

    def __iter__(self) -> Iterator[tuple[Any, dict[str, Any]]]:
        state = _state(self.dataset)
        boundary: list[float] | None = state.reading() + [0]  # before the first fetch
        position = 0
        for epoch in range(self.max_epochs):
            iterator = iter(self.dataset)
            yielded = 0
            while True:
                start = time.perf_counter()
                try:
                    item = next(iterator)
                except StopIteration:
                    break
                meta = _record(
                    self.dataset,
                    f"w{_worker_id()}#{position}",
                    time.perf_counter() - start,
                    self.every,
                )
                if boundary is not None:
                    meta["b"] = boundary
                    boundary = None
                yield item, meta
                position += 1
                yielded += 1
            del iterator  # the stream's generator has finished: what it freed at its end is gone
            if yielded == 0:
                return  # an empty epoch: the stream will not give more
            boundary = state.reading() + [epoch + 1]  # after the end of epoch ``epoch``


class ProbedCollate:
    """The user's collate over the items; the records travel beside the batch."""

    def __init__(self, collate: Callable[[list[Any]], Any]) -> None:
        self.collate = collate

    def __call__(
        self, pairs: list[tuple[Any, dict[str, Any]]] | FetchedBatch
    ) -> tuple[Any, list[dict[str, Any]]]:
        if isinstance(pairs, FetchedBatch):
            return self.collate(pairs.batch), pairs.records
        return self.collate([item for item, _ in pairs]), [meta for _, meta in pairs]
