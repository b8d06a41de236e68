"""Probe: each worker's memory while it iterates (memory-growth vs copy-on-write).

A real DataLoader iterates the probe's indices in shuffled passes (as training
does over epochs); several passes over the same indices show whether growth
stops after the first. Two different problems show up differently:

- memory-growth: the worker allocates and keeps memory. Inside each worker
  (``memory_worker``) the Python heap is told apart from native memory with
  ``tracemalloc``, next to the sizes of the dataset's containers and the
  allocation sites, so the rule can name the cause: a list on ``self`` that
  keeps every sample, a library cache that fills during the first pass and
  then stays flat, or native memory that keeps growing.
- copy-on-write: after fork a worker shares the parent's pages; reading a
  Python object writes its reference count, which makes the kernel copy the
  whole page into the worker. USS rises while RSS stays flat: shared pages
  turn private. A thread in the main process samples every worker's RSS and
  USS with psutil for this. NumPy arrays and tensors do not suffer from it
  (one object header, the data is never written).

NOTE [copy-on-write measure]
"USS rose while RSS stayed flat" missed copy-on-write in one run of two
(after other tests, 1 of 3 in a row): one worker's RSS rose 13 MB while its
USS rose 10 MB, so ``ΔUSS − ΔRSS`` read 0 for it and halved the mean below
the threshold. That RSS was not new memory: after fork a child maps the
shared libraries' pages (libtorch's code) lazily, as it first runs them, and
the worker that had not yet made its first batch when the baseline was read
faulted them in afterwards; they are shared, clean and file-backed. So on
Linux each reading also takes ``Private_Dirty`` and ``Anonymous`` from
``/proc/PID/smaps_rollup``: a page copied on write turns private-dirty
without adding anonymous memory, a new allocation adds both, a library page
neither, and copied = ΔPrivate_Dirty − ΔAnonymous. The baseline is read once
every worker has delivered a batch.

Every fetch is timed in the worker too: those fetches count toward the
check's coverage, and an index slow in two passes is a slow sample. The probe
only measures; ``memory_rules`` reads the measurements.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import psutil
from torch.utils.data import Sampler

from ..runtime.processes import private_mb, stop_workers, worker_pids
from .util import describe_worker_exception

MB = 1024 * 1024
_POINTS = 40  # RSS/USS readings from the main process, spread over the probe's samples
_POINTS_PER_PASS = 16  # heap/native readings inside each worker, per pass over the indices
_SLOWEST_KEPT = 20


class IndexCycler(Sampler[int]):
    """``total`` draws from ``indices``, reshuffled on each pass (like RandomSampler over
    epochs)."""

    def __init__(self, indices: list[int], total: int, *, seed: int = 0) -> None:
        self.indices = list(indices)
        self.total = total
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        import torch

        emitted = 0
        epoch = 0
        while emitted < self.total and self.indices:
            order = torch.randperm(
                len(self.indices), generator=torch.Generator().manual_seed(self.seed + epoch)
            ).tolist()
            for k in order:
                if emitted >= self.total:
                    return
                yield self.indices[k]
                emitted += 1
            epoch += 1

    def __len__(self) -> int:
        return self.total


def python_heap(obj: Any, *, max_objects: int = 3_000_000, seconds: float = 2.0) -> dict[str, Any]:
    """Bytes and count of the Python objects reachable from ``obj`` (array payloads excluded).

    These are the pages a fork worker copies when it touches the objects.
    Tensors and arrays count as their header only: their data is never written
    by reading them.
    """
    skip = (
        types.ModuleType,
        type,
        types.FunctionType,
        types.BuiltinFunctionType,
        types.CodeType,
        types.MethodType,
    )
    array_types: tuple[type, ...] = ()
    with contextlib.suppress(ImportError):
        import numpy as np
        import torch

        array_types = (np.ndarray, torch.Tensor)
    seen: set[int] = set()
    stack = [obj]
    total = 0
    count = 0
    deadline = time.monotonic() + seconds
    complete = True
    while stack:
        if count >= max_objects or (count % 4096 == 0 and time.monotonic() > deadline):
            complete = False
            break
        item = stack.pop()
        key = id(item)
        if key in seen or isinstance(item, skip):
            continue
        seen.add(key)
        count += 1
        if isinstance(item, array_types):
            total += 112  # the object header only
            continue
        try:
            total += sys.getsizeof(item)
        except TypeError:
            continue
        if isinstance(item, (str, bytes, int, float, bool, complex)) or item is None:
            continue
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        else:
            attrs = getattr(item, "__dict__", None)
            if isinstance(attrs, dict):
                stack.append(attrs)
            for name in getattr(type(item), "__slots__", ()) or ():
                if isinstance(name, str):
                    with contextlib.suppress(AttributeError):
                        stack.append(getattr(item, name))
    return {"bytes": total, "objects": count, "complete": complete}


class _MemorySampler:
    """Per worker ``[samples_per_worker, rss_mb, uss_mb, t, private_dirty_mb, anonymous_mb]``
    points (the last two where ``/proc/PID/smaps_rollup`` is readable: NOTE [copy-on-write
    measure]).

    The main loop calls :meth:`sample` every few batches, which spreads the
    points evenly over samples processed; a background thread adds a point when
    none was taken for ``idle`` seconds (slow pipelines).
    """

    def __init__(self, pids: list[int], counter: Any, idle: float = 0.25) -> None:
        self.procs = {}
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                self.procs[pid] = psutil.Process(pid)
        self.counter = counter
        self.idle = idle
        self.points: dict[int, list[list[float]]] = {pid: [] for pid in self.procs}
        self.cpu: dict[int, list[float]] = {pid: [] for pid in self.procs}
        self._lock = threading.Lock()
        self._last = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="stallscope-check-memory", daemon=True
        )
        self._t0 = time.perf_counter()

    def start(self) -> _MemorySampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.idle / 2):
            if time.perf_counter() - self._last >= self.idle:
                self.sample()

    def sample(self) -> None:
        with self._lock:
            n_workers = max(1, len(self.procs))
            samples = self.counter() / n_workers
            for pid, proc in self.procs.items():
                try:
                    uss, rollup = private_mb(proc)
                    rss = proc.memory_info().rss
                    cpu = proc.cpu_times()
                except (psutil.Error, AttributeError):
                    continue
                t = time.perf_counter() - self._t0
                point = [round(samples, 1), round(rss / MB, 3), round(uss, 3), round(t, 3)]
                if rollup is not None:
                    point += [round(rollup.private_dirty, 3), round(rollup.anonymous, 3)]
                self.points[pid].append(point)
                self.cpu[pid].append(cpu.user + cpu.system)
            self._last = time.perf_counter()


def probe_memory(
    pipeline: Any,
    *,
    indices: list[int],
    workers: int,
    start_method: str,
    batch_size: int,
    seconds: float,
    max_samples: int,
    batch_timeout: float,
    deadline: float,
    seed: int = 0,
    already_checked: set[Any] | None = None,
) -> dict[str, Any]:
    """Iterate up to ``max_samples`` shuffled samples (or ``seconds``) while sampling worker memory.

    ``max_samples`` beyond ``len(indices)`` makes further passes over the same
    indices, which show whether growth stops. Inside the workers
    (``memory_worker``) each fetch is timed and the Python heap is told apart
    from native memory; outside, a thread samples RSS and USS (copy-on-write).
    """
    from torch.utils.data import DataLoader

    from .memory_worker import ProbedCollate, ProbedDataset, ProbedIterable

    length = pipeline.length()
    pass_samples = len(indices) if not pipeline.is_iterable else None
    every = max(1, (pass_samples or max_samples) // max(1, workers) // _POINTS_PER_PASS)
    record: dict[str, Any] = {
        "start_method": start_method,
        "workers": workers,
        "batch_size": batch_size,
        "dataset_length": length,
        "indices_available": len(indices) if not pipeline.is_iterable else None,
        "pass_samples": pass_samples,
        "iterable": bool(pipeline.is_iterable),
        "python_heap": python_heap(pipeline.dataset),
        "samples": 0,
        "seconds": 0.0,
        "series": [],
        "workers_memory": [],
        "fetch_times": {},
        "stopped": None,
        "error": None,
    }
    consumed = [0]
    dataset: Any
    order: dict[str, Any] = {}  # an iterable dataset orders its own items
    if pipeline.is_iterable:
        dataset = ProbedIterable(pipeline.dataset, every)
    else:
        import torch

        dataset = ProbedDataset(pipeline.dataset, every)
        order = {
            "sampler": IndexCycler(indices, max_samples, seed=seed),
            "generator": torch.Generator().manual_seed(seed),
        }
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        collate_fn=ProbedCollate(pipeline.collate),
        worker_init_fn=pipeline.worker_init_fn,
        multiprocessing_context=start_method,
        timeout=batch_timeout,
        **order,
    )
    inside = _WorkerReports()
    started = time.perf_counter()
    until = deadline  # until the first batch (worker start-up); then ``seconds`` of iteration
    iterator = iter(loader)
    sampler = _MemorySampler(worker_pids(iterator), lambda: consumed[0])
    stride = max(1, max_samples // batch_size // _POINTS)
    failure: BaseException | None = None
    delivered: set[int] = set()
    baseline = False
    try:
        for k, (_batch, metas) in enumerate(iterator):
            consumed[0] += len(metas)
            inside.add(metas)
            delivered.update(meta["w"] for meta in metas)
            if not baseline and (len(delivered) >= workers or k >= 2 * workers):
                # The baseline: every worker is up and has made a batch (NOTE [copy-on-write
                # measure]).
                baseline = True
                sampler.sample()
                sampler.start()
                until = min(deadline, time.monotonic() + seconds)
            elif baseline and k % stride == 0:
                sampler.sample()
            if time.monotonic() >= until:
                record["stopped"] = "time"
                break
            if consumed[0] >= max_samples:
                break
    except Exception as exc:  # a timeout or the dataset raising in a worker: keep what was measured
        failure = exc
        record["error"] = describe_worker_exception(exc)
    finally:
        sampler.sample()
        sampler.stop()
        stop_workers(iterator, failure)  # NOTE [worker death] in runtime/processes.py
        del iterator
    elapsed = time.perf_counter() - started
    record["samples"] = consumed[0]
    record["seconds"] = round(elapsed, 3)
    record["workers_memory"] = inside.series()
    record["fetch_times"] = inside.fetch_times(already_checked)
    for pid, points in sampler.points.items():
        cpu = sampler.cpu[pid]
        span = points[-1][3] - points[0][3] if len(points) >= 2 else 0.0
        cpu_percent = (cpu[-1] - cpu[0]) / span * 100 if span > 0 else None
        record["series"].append(
            {
                "pid": pid,
                "points": points,
                "cpu_percent": None if cpu_percent is None else round(cpu_percent, 1),
            }
        )
    return record


class _WorkerReports:
    """What the workers' records say (``memory_worker``), gathered batch by batch in the main
    process."""

    def __init__(self) -> None:
        self.workers: dict[int, dict[str, Any]] = {}
        self.times: dict[Any, list[float]] = {}

    def add(self, metas: list[dict[str, Any]]) -> None:
        for meta in metas:
            seen = self.times.setdefault(meta["i"], [])
            if len(seen) < 2:
                seen.append(meta["s"])
            if "p" not in meta and "b" not in meta:
                continue
            worker = self.workers.setdefault(
                meta["w"],
                {
                    "worker": meta["w"],
                    "pid": meta["pid"],
                    "points": [],
                    "containers_start": {},
                    "containers_end": {},
                    "sites": [],
                },
            )
            if meta["pid"] != worker["pid"]:
                # a replacement worker (persistent_workers off never happens here): keep the first
                continue
            if "b" in meta:
                # a reading at an epoch boundary of a stream (NOTE [stream epochs] in
                # memory_worker.py)
                worker.setdefault("epoch_boundaries", []).append(meta["b"])
            if "p" not in meta:
                continue
            worker["points"].append(meta["p"])
            worker["containers_end"] = meta["containers"]
            if "containers_start" in meta:
                worker["containers_start"] = meta["containers_start"]
            if "sites" in meta:
                worker["sites"] = meta["sites"]

    def series(self) -> list[dict[str, Any]]:
        return [self.workers[w] for w in sorted(self.workers)]

    def fetch_times(self, already_checked: set[Any] | None) -> dict[str, Any]:
        """The timing of every fetch: a summary, the slowest with their second fetch, the coverage
        gained."""
        from .health import timing_summary

        first = {index: seen[0] for index, seen in self.times.items()}
        slowest = sorted(self.times.items(), key=lambda kv: kv[1][0], reverse=True)[:_SLOWEST_KEPT]
        return {
            "timing": timing_summary(sorted(first.values())),
            "slowest": [[index, *(round(s, 5) for s in seen)] for index, seen in slowest],
            "distinct_indices": len(first),
            "new_indices": len(set(first) - already_checked)
            if already_checked is not None
            else len(first),
        }
