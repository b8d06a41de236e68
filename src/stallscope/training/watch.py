"""``ss.watch(loader)``: data stalls inside the user's own training loop (SPEC §3.5).

The only change to a training loop is ``for batch in ss.watch(loader):``.
Per step (one batch) the wrapper records

- data wait: the time the loop was blocked in ``next()`` on the loader, and
- compute: the rest of the step, until the loop asks for the next batch.

On CUDA, kernels run asynchronously: without a synchronise, the "compute"
the CPU sees is only the launch time, and the GPU work spills into the next
``next()``. ``sync="cuda"`` (or any callable) synchronises at every step
boundary, so compute includes the device work and data wait is time the
device really idled. Its cost is measured (``sync`` in :meth:`Watch.to_dict`):
the time spent inside the synchronise, counted as compute, plus the lost
overlap of the CPU running ahead into the next fetch.

The hot path is two ``perf_counter`` calls and three appends to ``array('d')``
per step; everything else (CPU/memory of main + workers, GPU utilisation via
NVML, prefetch-buffer occupancy) is sampled by background threads at a low
rate, and all statistics are computed when asked (:meth:`Watch.to_dict`).

The first batch of every epoch (which includes starting the workers) is kept
out of the steady-state figures and reported as ``first_batch_s``.

For loops that do not iterate a loader directly, the same recorder has a
manual API: ``with w.data(): batch = ...``, ``w.next(iterator)``,
``w.data_start()`` / ``w.data_end()`` (what the Lightning callback uses).
"""

from __future__ import annotations

import contextlib
import csv as csv_module
import json
import math
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Union

from ..analysis import training as analysis
from ..errors import UsageError
from ..runtime.processes import worker_pids

# A runtime alias: typing.Union, not ``|``, so that Python 3.9 can evaluate it.
SyncSpec = Union[None, str, bool, Callable[[], Any]]
Clock = Callable[[], float]

# How often (in steps) pending per-step rows go to the JSONL/CSV files.
FLUSH_EVERY = 256
# TensorBoard scalars every this many steps when log_every is not given.
TENSORBOARD_EVERY = 50


# -- pieces the wrapper is built from (each testable alone) --------------------------------


def resolve_sync(sync: SyncSpec) -> tuple[Callable[[], Any] | None, str | None]:
    """The function to call at each step boundary, and its name for the record.

    ``None``/``False``: no synchronise. ``"cuda"``/``True``: ``torch.cuda.synchronize``
    (a usage error when no CUDA device is visible). A callable: called as is
    (e.g. ``torch.cuda.current_stream().synchronize`` or another backend's).
    """
    if sync is None or sync is False:
        return None, None
    if callable(sync):
        return sync, getattr(sync, "__qualname__", None) or type(sync).__name__
    if sync is True or sync == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("sync='cuda' needs a CUDA device, and this process sees none; leave sync=None on CPU.")
        return torch.cuda.synchronize, "cuda"
    raise UsageError(f"sync must be None, 'cuda' or a callable, not {sync!r}.")


def prefetch_occupancy(iterator: Any) -> tuple[int, int] | None:
    """``(ready, capacity)`` of a multi-process DataLoader iterator's prefetch buffer.

    ready = batches the workers have finished that the main process has not
    consumed yet: items in the worker result queue (and in the pin-memory
    thread's queue) plus batches that arrived out of order and wait in
    ``_task_info``. capacity = ``prefetch_factor × num_workers`` (the most
    batches torch keeps in flight). Read-only and defensive: None for a
    single-process iterator, a shut-down one, a platform where
    ``Queue.qsize()`` is not implemented (macOS), or a torch whose internals
    differ (verified on torch 2.13).
    """
    try:
        workers = int(getattr(iterator, "_num_workers", 0) or 0)
        factor = int(getattr(iterator, "_prefetch_factor", 0) or 0)
        if workers <= 0 or factor <= 0 or getattr(iterator, "_shutdown", False):
            return None
        capacity = workers * factor
        result_queue = iterator._worker_result_queue
        ready = int(result_queue.qsize())
        data_queue = getattr(iterator, "_data_queue", result_queue)
        if data_queue is not result_queue:  # pin_memory: a thread moves batches to a second queue
            ready += int(data_queue.qsize())
        # C-level copy: atomic under the GIL while the main thread mutates the dict.
        infos = list(getattr(iterator, "_task_info", {}).values())
        ready += sum(1 for info in infos if len(info) == 2)
    except Exception:  # NotImplementedError (macOS qsize), a closed queue, changed internals
        return None
    return min(ready, capacity), capacity


class _Sampling:
    """Background sampling while an epoch runs: occupancy + GPU here, CPU/memory in a ResourceSampler."""

    def __init__(self, watch: Watch, iterator: Any) -> None:
        self._watch = watch
        self._iterator = iterator
        self._stop = threading.Event()
        self.resources = None
        if watch.sample_resources:
            from ..runtime.resources import ResourceSampler

            pids = (lambda: worker_pids(iterator)) if iterator is not None else None
            self.resources = ResourceSampler(watch.resource_interval, uss_every=8, worker_pids=pids, keep_ticks=True)
            self.resources.start()
        self._thread = threading.Thread(target=self._run, name="stallscope-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._watch.sample_interval):
            self.sample_once()

    def sample_once(self) -> None:
        watch = self._watch
        if not watch._in_steady_state():
            return  # waiting for the epoch's first batch (workers starting) or warming up
        if self._iterator is not None:
            occ = prefetch_occupancy(self._iterator)
            if occ is not None:
                watch._occ_ready.append(occ[0])
                watch._occ_capacity = occ[1]
        gpu = watch._gpu.sample()
        if gpu is not None:
            watch._gpu_util.append(gpu.util_percent)
            watch._gpu_mem_max = max(watch._gpu_mem_max, gpu.memory_used_mb)
            watch._gpu_mem_total = gpu.memory_total_mb

    def latest_cpu(self) -> tuple[float, float] | None:
        tick = self.resources.latest() if self.resources is not None else None
        return None if tick is None else (tick.main_cpu_percent, tick.workers_cpu_percent)

    def stop(self) -> dict[str, Any] | None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        if self.resources is None:
            return None
        summary = self.resources.stop()
        return summary.to_dict()


def merge_resources(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One resources dict from per-epoch ones: CPU % weighted by seconds, memory peaks."""
    parts = [p for p in parts if p]
    if not parts:
        return None
    seconds = sum(p.get("seconds", 0.0) for p in parts) or 1e-9
    merged: dict[str, Any] = {
        "main_cpu_percent": round(sum(p["main_cpu_percent"] * p.get("seconds", 0.0) for p in parts) / seconds, 2),
        "workers_cpu_percent": round(sum(p["workers_cpu_percent"] * p.get("seconds", 0.0) for p in parts) / seconds, 2),
        "main_rss_mb": max(p["main_rss_mb"] for p in parts),
        "workers_rss_mb": max(p["workers_rss_mb"] for p in parts),
        "n_workers": max(p["n_workers"] for p in parts),
        "seconds": round(seconds, 3),
    }
    uss = [p["worker_uss_mb"] for p in parts if p.get("worker_uss_mb") is not None]
    merged["worker_uss_mb"] = max(uss) if uss else None
    return merged


def _open_tensorboard(spec: Any) -> Any:
    """A SummaryWriter for a log dir, or the user's own writer (anything with ``add_scalar``)."""
    if spec is None:
        return None
    if hasattr(spec, "add_scalar"):
        return spec
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 - optional dependency
    except ImportError:
        raise UsageError(
            f"tensorboard={str(spec)!r} needs the tensorboard package (pip install tensorboard), which is not installed."
        ) from None
    return SummaryWriter(log_dir=str(spec))


# -- the wrapper ---------------------------------------------------------------------------


class Watch:
    """Wraps an iterable loader and records data wait vs compute per step. See the module docstring.

    Use :func:`watch` to create one. Iterating it iterates the loader (one
    epoch per ``for`` loop); ``len()`` and unknown attributes go to the loader.
    """

    def __init__(
        self,
        loader: Any,
        *,
        log_every: int | None = None,
        sync: SyncSpec = None,
        sample_resources: bool = True,
        jsonl: str | Path | None = None,
        csv: str | Path | None = None,
        tensorboard: Any = None,
        name: str = "train",
        warmup: int = 0,
        log: Callable[[str], Any] | Any | None = None,
        sample_interval: float = 0.1,
        resource_interval: float = 0.25,
        gpu: Any = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        if log_every is not None and log_every < 1:
            raise UsageError(f"log_every must be a positive number of steps, not {log_every}.")
        if warmup < 0:
            raise UsageError(f"warmup must be >= 0 steps, not {warmup}.")
        self._loader = loader
        self.name = name
        self.log_every = log_every
        self.warmup = warmup
        self.sample_resources = sample_resources
        self.sample_interval = sample_interval
        self.resource_interval = resource_interval
        self._sync, self.sync_mode = resolve_sync(sync)
        self._clock = clock
        self._log = _log_function(log)
        self._tensorboard = _open_tensorboard(tensorboard)
        self._jsonl_path = Path(jsonl) if jsonl is not None else None
        self._csv_path = Path(csv) if csv is not None else None
        self._gpu_spec = gpu
        self._gpu: Any = None
        # per step: request time (absolute clock), data wait, compute (s)
        self._t_req = array("d")
        self._data = array("d")
        self._compute = array("d")
        self._sync_s = array("d")
        self._epoch_starts: list[int] = []
        self._pending: float | None = None  # manual API: a data wait in progress since this time
        self._occ_ready = array("l")
        self._occ_capacity: int | None = None
        self._gpu_util = array("d")
        self._gpu_mem_max = 0.0
        self._gpu_mem_total: float | None = None
        self._resources: list[dict[str, Any]] = []
        self._session: _Sampling | None = None
        self._t0: float | None = None
        self._logged_upto = 0
        self._tb_upto = 0
        self._rows_written = 0
        self._files: dict[str, tuple[IO[str], Any]] = {}
        self._ranks: list[dict[str, Any]] | None = None
        self._iterator: Any = None

    # -- iteration (the hot path) ----------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        clock = self._clock
        sync = self._sync
        if self._gpu is None:
            self._gpu = _open_gpu(self._gpu_spec)  # NVML start-up is not data wait
        t_req = clock()  # iter() is part of the first wait: worker start-up lands in first_batch_s
        self._begin_epoch(t_req)
        iterator = iter(self._loader)
        self._iterator = _weak(iterator)
        self._start_session(iterator)
        data, compute = self._data, self._compute
        req_append, data_append, compute_append = self._t_req.append, data.append, compute.append
        sync_append = self._sync_s.append
        step = len(data)
        next_event = self._next_event(step)
        t_got = t_req
        try:
            while True:
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                t_got = clock()
                req_append(t_req)
                data_append(t_got - t_req)
                step += 1
                if step >= next_event:
                    next_event = self._on_event(step)
                yield batch
                # The loop came back for the next batch: this step's compute ends here.
                if sync is None:
                    t_req = clock()
                else:
                    t_sync = clock()
                    sync()
                    t_req = clock()
                    sync_append(t_req - t_sync)
                if len(compute) < step:  # end_step() may have closed it already
                    compute_append(t_req - t_got)
        finally:
            if len(compute) < len(data):
                # GeneratorExit: the loop broke out after this step's work (CPython closes
                # the generator as the for loop drops it), so the step ends now.
                if sync is not None:
                    with contextlib.suppress(Exception):
                        sync()
                compute_append(clock() - t_got)
            self._end_epoch()

    def _begin_epoch(self, now: float) -> None:
        if self._t0 is None:
            self._t0 = now
        if self._gpu is None:
            self._gpu = _open_gpu(self._gpu_spec)
        self._pending = None
        self._epoch_starts.append(len(self._data))

    def _start_session(self, iterator: Any) -> None:
        if self._session is None and self.sample_resources:
            self._session = _Sampling(self, iterator)

    def _end_epoch(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            resources = session.stop()
            if resources is not None:
                self._resources.append(resources)
        self._flush_rows()

    def _in_steady_state(self) -> bool:
        """Whether the current epoch has delivered its first batch and warm-up is over (sampler thread)."""
        steps = len(self._data)
        starts = self._epoch_starts
        return bool(starts) and steps > starts[-1] and steps > self.warmup

    # -- manual API (plain loops, Lightning) -----------------------------------------------
    def data_start(self) -> None:
        """The loop starts waiting for data; the open step (if any) ends here."""
        if self._t0 is None or self._gpu is None:
            self._begin_epoch(self._clock())
        if self._session is None:
            self._start_session(None)
        if self._sync is not None:
            t_sync = self._clock()
            self._sync()
            now = self._clock()
            if len(self._compute) < len(self._data):
                self._sync_s.append(now - t_sync)
        else:
            now = self._clock()
        self._close_open_step(now)
        self._pending = now

    def data_end(self) -> None:
        """The batch arrived: a step starts (its compute runs until the next ``data_start``)."""
        now = self._clock()
        if self._pending is None:
            return  # no wait was being timed (e.g. the first batch after a pause)
        self._t_req.append(self._pending)
        self._data.append(now - self._pending)
        self._pending = None
        step = len(self._data)
        if step >= self._next_event(step - 1):
            self._on_event(step)

    def cancel_wait(self) -> None:
        """Drop a data wait in progress (the loop went elsewhere: validation, epoch end)."""
        self._pending = None

    def end_step(self) -> None:
        """End the open step now; time until the next data request is not counted."""
        self._close_open_step(self._clock())

    def epoch_start(self) -> None:
        """A new epoch: the next batch counts as its first (start-up), timed from now."""
        now = self._clock()
        self._close_open_step(now)
        self._begin_epoch(now)
        if self._session is None:
            self._start_session(None)
        self._pending = now

    @contextlib.contextmanager
    def data(self) -> Iterator[None]:
        """``with w.data(): batch = fetch()`` times the block as data wait."""
        self.data_start()
        yield
        self.data_end()

    def next(self, iterator: Iterator[Any]) -> Any:
        """``next(iterator)`` timed as data wait; StopIteration passes through untimed."""
        self.data_start()
        try:
            batch = next(iterator)
        except StopIteration:
            self.cancel_wait()
            raise
        self.data_end()
        return batch

    def _close_open_step(self, now: float) -> None:
        if len(self._compute) < len(self._data):
            self._compute.append(now - (self._t_req[-1] + self._data[-1]))

    def close(self) -> None:
        """Stop background sampling and flush/close the log files (the loader is left alone)."""
        self._end_epoch()
        for handle, _ in self._files.values():
            with contextlib.suppress(OSError):
                handle.close()
        self._files.clear()
        if self._tensorboard is not None:
            with contextlib.suppress(Exception):
                self._tensorboard.flush()
        if self._gpu is not None:
            self._gpu.close()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- delegation -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    @property
    def loader(self) -> Any:
        return self._loader

    @property
    def current_iterator(self) -> Any:
        """The loader iterator of the latest epoch (e.g. to shut its workers down)."""
        return self._iterator() if self._iterator is not None else None

    @property
    def steps(self) -> int:
        """Steps recorded so far (batches delivered)."""
        return len(self._data)

    # -- periodic work: live line, TensorBoard, per-step files ----------------------------
    def _next_event(self, step: int) -> int:
        candidates = []
        if self.log_every:
            candidates.append((step // self.log_every + 1) * self.log_every)
        if self._tensorboard is not None:
            every = self.log_every or TENSORBOARD_EVERY
            candidates.append((step // every + 1) * every)
        if self._jsonl_path is not None or self._csv_path is not None:
            candidates.append((step // FLUSH_EVERY + 1) * FLUSH_EVERY)
        return min(candidates) if candidates else sys.maxsize

    def _on_event(self, step: int) -> int:
        # The current step is still open: windows cover closed steps only.
        closed = len(self._compute)
        if self.log_every and step % self.log_every == 0 and closed > self._logged_upto:
            self._log(self.live_line(self._logged_upto, closed))
            self._logged_upto = closed
        every = self.log_every or TENSORBOARD_EVERY
        if self._tensorboard is not None and step % every == 0 and closed > self._tb_upto:
            self._write_tensorboard(self._tb_upto, closed)
            self._tb_upto = closed
        if step % FLUSH_EVERY == 0:
            self._flush_rows()
        return self._next_event(step)

    def _window(self, start: int, end: int) -> tuple[float, float]:
        data = sum(self._data[start:end])
        compute = sum(self._compute[start:end])
        return data, compute

    def stall_between(self, start: int, end: int | None = None) -> float | None:
        """Stall fraction of the closed steps in ``[start, end)`` (None when they took no time)."""
        end = len(self._compute) if end is None else min(end, len(self._compute))
        data, compute = self._window(start, end)
        return data / (data + compute) if data + compute > 0 else None

    def live_line(self, start: int, end: int) -> str:
        """One log line for steps ``[start, end)``: mean data/compute ms, stall %, buffer, GPU, CPU."""
        n = max(1, end - start)
        data, compute = self._window(start, end)
        total = data + compute
        parts = [
            f"[stallscope {self.name}] step {end}",
            f"data {data / n * 1000:.2f} ms",
            f"compute {compute / n * 1000:.2f} ms",
            f"stall {data / total * 100:.0f}%" if total > 0 else "stall n/a",
        ]
        if self._occ_ready and self._occ_capacity:
            parts.append(f"buffer {self._occ_ready[-1]}/{self._occ_capacity}")
        if self._gpu_util:
            parts.append(f"gpu {self._gpu_util[-1]:.0f}%")
        session = self._session
        cpu = session.latest_cpu() if session is not None else None
        if cpu is not None:
            parts.append(f"cpu main {cpu[0]:.0f}% workers {cpu[1]:.0f}%")
        return " | ".join(parts)

    def _write_tensorboard(self, start: int, end: int) -> None:
        n = max(1, end - start)
        data, compute = self._window(start, end)
        prefix = f"stallscope/{self.name}"
        writer = self._tensorboard
        writer.add_scalar(f"{prefix}/data_ms", data / n * 1000, end)
        writer.add_scalar(f"{prefix}/compute_ms", compute / n * 1000, end)
        if data + compute > 0:
            writer.add_scalar(f"{prefix}/stall_fraction", data / (data + compute), end)
        if self._occ_ready and self._occ_capacity:
            writer.add_scalar(f"{prefix}/buffer_ready", self._occ_ready[-1], end)
        if self._gpu_util:
            writer.add_scalar(f"{prefix}/gpu_util", self._gpu_util[-1], end)

    def step_rows(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        """Closed steps as dicts: step, epoch, t_s (since the first request), data_ms, compute_ms, first."""
        end = len(self._compute) if end is None else end
        t0 = self._t0 or 0.0
        starts = self._epoch_starts
        rows = []
        epoch = max(0, _bisect_right(starts, start) - 1)
        for i in range(start, end):
            while epoch + 1 < len(starts) and starts[epoch + 1] <= i:
                epoch += 1
            compute = self._compute[i]
            rows.append(
                {
                    "step": i,
                    "epoch": epoch,
                    "t_s": round(self._t_req[i] - t0, 6),
                    "data_ms": round(self._data[i] * 1000, 4),
                    "compute_ms": round(compute * 1000, 4) if math.isfinite(compute) else None,
                    "first": bool(starts) and i == starts[epoch],
                }
            )
        return rows

    def _flush_rows(self) -> None:
        if self._jsonl_path is None and self._csv_path is None:
            return
        end = len(self._compute)
        if end <= self._rows_written:
            return
        rows = self.step_rows(self._rows_written, end)
        if self._jsonl_path is not None:
            handle, _ = self._file("jsonl", self._jsonl_path)
            handle.write("".join(json.dumps(r) + "\n" for r in rows))
            handle.flush()
        if self._csv_path is not None:
            handle, writer = self._file("csv", self._csv_path)
            writer.writerows(rows)
            handle.flush()
        self._rows_written = end

    def _file(self, kind: str, path: Path) -> tuple[IO[str], Any]:
        if kind not in self._files:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = path.open("w", newline="" if kind == "csv" else None)
            writer = None
            if kind == "csv":
                writer = csv_module.DictWriter(handle, fieldnames=["step", "epoch", "t_s", "data_ms", "compute_ms", "first"])
                writer.writeheader()
            self._files[kind] = (handle, writer)
        return self._files[kind]

    # -- results ---------------------------------------------------------------------------
    def to_dict(self, *, timeline: bool = True, context: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``profile`` section (the record schema, stallscope/schema/record-v1.json): stall fraction, verdict, what-if, occupancy, ..."""
        profile = summarize_steps(
            data_s=list(self._data),
            compute_s=list(self._compute),
            epoch_starts=list(self._epoch_starts),
            warmup=self.warmup,
            with_timeline=timeline,
        )
        profile["name"] = self.name
        profile["occupancy"] = occupancy_summary(list(self._occ_ready), self._occ_capacity)
        profile["gpu_util"] = round(sum(self._gpu_util) / len(self._gpu_util), 2) if self._gpu_util else None
        profile["gpu"] = self._gpu_dict()
        profile["resources"] = merge_resources(self._resources)
        profile["sync"] = sync_summary(self.sync_mode, list(self._sync_s), profile)
        profile["ranks"] = self._ranks
        if self._ranks:
            from ..runtime.distributed import rank_info

            profile["rank"] = rank_info().rank
        profile["distributed"] = analysis.rank_report(self._ranks) if self._ranks else None
        ctx = dict(self._default_context())
        ctx.update(context or {})
        profile.update(epoch_startup(profile, ctx.get("epoch_steps")))
        recommendations = analysis.advise(profile, ctx)
        profile["advice"] = analysis.next_knob(profile, recommendations)
        profile["recommendations"] = recommendations
        return profile

    def _default_context(self) -> dict[str, Any]:
        from ..runtime.distributed import rank_info
        from ..runtime.host import usable_cores

        ctx: dict[str, Any] = {"cores": usable_cores(), "local_world_size": rank_info().local_world_size}
        with contextlib.suppress(Exception):
            ctx["epoch_steps"] = len(self._loader)
        with contextlib.suppress(Exception):
            from torch.utils.data import DataLoader

            if isinstance(self._loader, DataLoader):
                from ..config import config_from_loader

                config = config_from_loader(self._loader)
                ctx["config"] = config.to_dict()
                ctx["config_label"] = config.label()
        return ctx

    def _gpu_dict(self) -> dict[str, Any] | None:
        gpu = self._gpu
        if gpu is None:
            return None
        if not gpu.available:
            return {"available": False, "reason": gpu.reason}
        util = sorted(self._gpu_util)
        return {
            "available": True,
            "name": gpu.name,
            "util_percent_mean": round(sum(util) / len(util), 2) if util else None,
            "util_percent_p50": util[len(util) // 2] if util else None,
            "memory_used_mb_max": round(self._gpu_mem_max, 1) if util else None,
            "memory_total_mb": self._gpu_mem_total,
            "samples": len(util),
        }

    def summary(self) -> str:
        """A human-readable summary (plain text, several lines)."""
        from ..render.console_profile import summary_lines

        return "\n".join(summary_lines(self.to_dict(timeline=False)))

    def gather(self) -> dict[str, Any]:
        """Exchange per-rank summaries under torch.distributed; every rank must call it.

        Returns :meth:`to_dict` with ``ranks`` (one entry per rank) and
        ``distributed`` (the slowest rank, the maximum exposed data wait).
        Outside a distributed job it returns ``to_dict()`` with one rank.
        """
        from ..runtime.distributed import gather_to_all, rank_entry, rank_info

        info = rank_info()
        mine = rank_entry(self.to_dict(timeline=False), info)
        self._ranks = gather_to_all(mine)
        return self.to_dict()


def _weak(obj: Any) -> Callable[[], Any]:
    """A weak reference where possible: holding the iterator would keep a broken-out epoch's workers alive."""
    import weakref

    try:
        return weakref.ref(obj)
    except TypeError:  # e.g. a generator-like object without weakref support
        return lambda: None


def _bisect_right(values: list[int], x: int) -> int:
    import bisect

    return bisect.bisect_right(values, x)


def _open_gpu(spec: Any) -> Any:
    from ..runtime.gpu import NullGpuMonitor, open_gpu_monitor

    if spec is False:
        return NullGpuMonitor("GPU sampling turned off (gpu=False)")
    if spec is not None:
        return spec  # a monitor object (tests pass a fake one)
    try:
        import torch

        if not torch.cuda.is_available():
            return NullGpuMonitor("torch sees no CUDA device")
    except Exception:
        return NullGpuMonitor("torch.cuda unavailable")
    return open_gpu_monitor()


def _log_function(log: Any) -> Callable[[str], Any]:
    if log is None:
        return lambda line: print(line, file=sys.stderr, flush=True)
    if hasattr(log, "info"):  # a logging.Logger
        return log.info
    if callable(log):
        return log
    raise UsageError(f"log must be a callable or a logging.Logger, not {type(log).__name__}.")


# -- pure summaries (tested with exact numbers) --------------------------------------------


def summarize_steps(
    *,
    data_s: list[float],
    compute_s: list[float],
    epoch_starts: list[int],
    warmup: int = 0,
    with_timeline: bool = True,
) -> dict[str, Any]:
    """Steady-state stall figures from per-step data wait and compute (seconds)."""
    n = len(data_s)
    compute_full = list(compute_s) + [math.nan] * (n - len(compute_s))
    closed = [math.isfinite(c) for c in compute_full]
    mask = analysis.steady_mask(n, epoch_starts, warmup, closed)
    steady_data = [d for d, m in zip(data_s, mask) if m]
    steady_compute = [c for c, m in zip(compute_full, mask) if m]
    data_total = sum(steady_data)
    compute_total = sum(steady_compute)
    total = data_total + compute_total
    stall = data_total / total if total > 0 else None
    firsts = [data_s[i] for i in epoch_starts if i < n]
    wall = sum(d for d in data_s) + sum(c for c in compute_full if math.isfinite(c))
    data_dist = analysis.distribution_ms(steady_data)
    compute_dist = analysis.distribution_ms(steady_compute)
    step_dist = analysis.distribution_ms([d + c for d, c in zip(steady_data, steady_compute)])
    profile: dict[str, Any] = {
        "steps": len(steady_data),  # the steps the figures cover (steady state)
        "total_steps": n,  # all recorded, with warm-up and each epoch's first batch
        "warmup_steps": min(warmup, n),
        "epochs": len(epoch_starts),
        "stall_fraction": round(stall, 4) if stall is not None else None,
        "verdict": analysis.verdict_for(stall),
        "thresholds": analysis.thresholds(),
        "what_if_speedup": _round(analysis.what_if_speedup(total, compute_total), 3),
        "data_ms": data_dist.to_dict() if data_dist else None,
        "compute_ms": compute_dist.to_dict() if compute_dist else None,
        "step_ms": step_dist.to_dict() if step_dist else None,
        "steps_per_s": round(len(steady_data) / total, 3) if total > 0 else None,
        "first_batch_s": round(firsts[0], 4) if firsts else None,
        "epoch_start_s": [round(f, 4) for f in firsts],
        "startup_share": round(sum(firsts) / wall, 4) if wall > 0 and firsts else None,
        "wall_s": round(wall, 4),
    }
    if with_timeline:
        profile["step_timeline"] = analysis.timeline(data_s, compute_full)
    return profile


def epoch_startup(profile: dict[str, Any], epoch_steps: int | None) -> dict[str, Any]:
    """The first batch's share of one whole epoch of ``epoch_steps`` steady steps.

    A short measurement overstates start-up (one first batch against a few
    dozen steps); what matters is its cost against a real epoch.
    """
    first = profile.get("first_batch_s")
    step = (profile.get("step_ms") or {}).get("mean")
    if not epoch_steps or first is None or step is None:
        return {"epoch_steps": epoch_steps, "startup_share_per_epoch": None}
    epoch_s = epoch_steps * step / 1000.0
    return {"epoch_steps": epoch_steps, "startup_share_per_epoch": round(first / (first + epoch_s), 4)}


def occupancy_summary(ready: list[int], capacity: int | None) -> dict[str, Any] | None:
    """Mean ready batches and how often the buffer was empty / full, from background samples."""
    if not ready or not capacity:
        return None
    n = len(ready)
    mean_ready = sum(ready) / n
    return {
        "capacity": capacity,
        "mean_ready": round(mean_ready, 3),
        "mean_fraction": round(mean_ready / capacity, 4),
        "empty_fraction": round(sum(1 for r in ready if r == 0) / n, 4),
        "full_fraction": round(sum(1 for r in ready if r >= capacity) / n, 4),
        "samples": n,
    }


def sync_summary(mode: str | None, sync_s: list[float], profile: dict[str, Any]) -> dict[str, Any] | None:
    """What synchronising at step boundaries cost: time inside the sync call, and its share of the run."""
    if mode is None:
        return None
    total = sum(sync_s)
    wall = profile.get("wall_s") or 0.0
    return {
        "mode": mode,
        "calls": len(sync_s),
        "mean_ms": round(total / len(sync_s) * 1000, 4) if sync_s else None,
        "total_s": round(total, 4),
        "share_of_wall": round(total / wall, 4) if wall > 0 else None,
        "note": (
            "time spent waiting in the synchronise is device work, counted as compute; "
            "the CPU no longer runs ahead into the next fetch while the device works"
        ),
    }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def watch(
    loader: Any,
    *,
    log_every: int | None = None,
    sync: SyncSpec = None,
    sample_resources: bool = True,
    jsonl: str | Path | None = None,
    csv: str | Path | None = None,
    tensorboard: Any = None,
    name: str = "train",
    **options: Any,
) -> Watch:
    """Wrap ``loader`` to measure data stalls in your own loop: ``for batch in ss.watch(loader):``.

    - ``log_every=N``: a live line every N steps (stderr, or ``log=`` a callable/Logger).
    - ``sync="cuda"`` (or a callable): synchronise at each step boundary for honest device timing.
    - ``sample_resources``: background sampling of CPU/memory (main + workers), GPU via NVML,
      and prefetch-buffer occupancy; False turns every background thread off.
    - ``jsonl=`` / ``csv=``: per-step rows; ``tensorboard=``: a log dir or a SummaryWriter.
    - further options: ``warmup`` (steps kept out of steady state), ``log``,
      ``sample_interval``, ``resource_interval``, ``gpu`` (a monitor or False), ``clock``.

    Then ``w.summary()`` (text), ``w.to_dict()`` (the profile section), ``w.gather()`` under torchrun.
    """
    return Watch(
        loader,
        log_every=log_every,
        sync=sync,
        sample_resources=sample_resources,
        jsonl=jsonl,
        csv=csv,
        tensorboard=tensorboard,
        name=name,
        **options,
    )
