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

The first batch of every epoch (which includes starting the workers) is kept
out of the steady-state figures and reported as ``first_batch_s``.

For loops that do not iterate a loader directly, the same recorder has a
manual API: ``w.next(iterator)``, ``w.timed(iterator)`` (an iterator whose
every ``next()`` is timed: what the framework integrations hand to the
framework), ``with w.data(): ...``, ``w.data_start()`` / ``w.data_end()``,
``w.pause()`` for validation and epoch ends.

Outputs while the loop runs go through :mod:`.sinks`; background sampling
lives in :mod:`.sampling`; the figures are computed when asked, by
:mod:`.summary`; time windows for long runs (stall and memory per window,
memory drift) by :mod:`.windows`, from the same per-step arrays and the
sampler's readings. The text summary is a renderer's job:
``ss.stall_summary(w)`` (``stallscope.render.console_profile``).

NOTE [watch hot path]
    Per step the wrapped loop pays two clock reads, three ``array('d')``
    appends, one length check and one integer comparison with the next step
    at which a sink is due (``sys.maxsize`` with no sink: the null sink
    never comes due). Nothing on that path branches on an option: the step
    boundary is a plain clock read, or a synchronising one chosen once per
    epoch; sinks and the inline resource readings (a single-process loader
    without a GPU: no sampler thread, NOTE [sampler and the GIL] in
    sampling.py) are reached only through the due-step comparison; a sampler
    thread, where one is needed, runs at a low rate and never touches the loop. Anything
    added here is paid on every step of every user's training run; measure
    it with benchmarks/watch_overhead.py (SPEC §7: ≤ 1% on in-memory data).
"""

from __future__ import annotations

import bisect
import contextlib
import sys
import time
import weakref
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..analysis import training as rules
from ..analysis.drift import slowest_rank_per_window
from ..errors import UsageError
from ..runtime.resources import ResourceSampler, window_clocks
from . import windows as time_windows
from .sampling import BackgroundSampler, Samples, find_loader_iterator, needs_thread, open_gpu
from .sinks import open_sinks, row
from .summary import (
    epoch_startup,
    gpu_summary,
    loader_context,
    merge_resources,
    occupancy_summary,
    summarize_steps,
    sync_summary,
)
from .timing import SyncSpec, TimedIterator, resolve_sync

__all__ = ["FETCH_TIMING", "SyncSpec", "TimedIterator", "Watch", "resolve_sync", "watch"]

Clock = Callable[[], float]

# Steps after an epoch's start at which the first inline resource reading is due (then every ~resource_interval).
_FIRST_INLINE_TICK = 16

# How the data wait was timed, for the record (``timing.method``).
FETCH_TIMING = "fetch"


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
        sample_interval: float = 0.2,
        resource_interval: float = 0.5,
        gpu: Any = None,
        clock: Clock = time.perf_counter,
        window_s: float = time_windows.DEFAULT_WINDOW_S,
        windows_jsonl: str | Path | None = None,
        batch_size: int | None = None,
    ) -> None:
        if log_every is not None and log_every < 1:
            raise UsageError(f"log_every must be a positive number of steps, not {log_every}.")
        if not window_s > 0:
            raise UsageError(f"window_s must be a positive number of seconds, not {window_s}.")
        if warmup < 0:
            raise UsageError(f"warmup must be >= 0 steps, not {warmup}.")
        self._loader = loader
        self.name = name
        self.warmup = warmup
        self.sample_resources = sample_resources
        self.sample_interval = sample_interval
        self.resource_interval = min(resource_interval, window_s / 4)  # a few memory readings in every window
        self._sync, self.sync_mode = resolve_sync(sync)
        self._clock = clock
        self.window_s = float(window_s)
        self._resource_windows = time_windows.ResourceWindows(self.window_s)  # the sampler folds its readings in here
        batch_size = batch_size or getattr(loader, "batch_size", None)  # samples per step, for per-sample rates
        self._batch_size = batch_size if isinstance(batch_size, int) and batch_size > 0 else None
        self._sinks = open_sinks(log_every=log_every, log=log, tensorboard=tensorboard, jsonl=jsonl, csv=csv,
                                 windows_jsonl=windows_jsonl)
        # How the waits are timed; an integration that must fall back to hook gaps says so here.
        self.timing: dict[str, Any] = {"method": FETCH_TIMING, "note": None}
        self._gpu_spec = gpu
        self._gpu: Any = None
        # per step: request time (absolute clock), data wait, compute (s)
        self._t_req = array("d")
        self._data = array("d")
        self._compute = array("d")
        self._sync_s = array("d")
        self._epoch_starts: list[int] = []
        self._pending: float | None = None  # manual API: a data wait in progress since this time
        self._paused = False  # manual API: the loop left training (validation); samplers skip
        self._samples = Samples()
        self._sampler: BackgroundSampler | None = None  # started at the first epoch, kept until close()
        self._sampling = False  # the sampler is told an epoch is in progress (or the inline window is open)
        # Resources read on the loop's own thread when no thread is needed (NOTE [sampler and the GIL]).
        self._inline: Any = None  # a ResourceSampler driven from the loop
        self._inline_open = False
        self._tick_due = sys.maxsize  # the step at which the inline reading is due
        self._tick_at = (0.0, 0)  # (time, step) of the latest inline reading
        self._t0: float | None = None
        self._ranks: list[dict[str, Any]] | None = None
        self._iterator: Callable[[], Any] = _none

    # -- iteration (the hot path, NOTE [watch hot path]) ------------------------------------
    def __iter__(self) -> Iterator[Any]:
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        clock = self._clock
        boundary = clock if self._sync is None else self._synced_clock
        self._open_gpu()  # NVML start-up is not data wait
        t_req = clock()  # iter() is part of the first wait: worker start-up lands in first_batch_s
        self._begin_epoch(t_req)
        iterator = iter(self._loader)
        self.observe(iterator)
        self._begin_sampling()
        data, compute = self._data, self._compute
        req_append, data_append, compute_append = self._t_req.append, data.append, compute.append
        step = len(data)
        sink_due = self._sinks.due_after(step)
        next_due = min(sink_due, self._tick_due)
        t_got = t_req
        try:
            for batch in iterator:  # FOR_ITER: no next() call to look up per step
                t_got = clock()
                req_append(t_req)
                data_append(t_got - t_req)
                step += 1
                if step >= next_due:
                    if step >= sink_due:
                        sink_due = self._sinks.at_step(self, step)
                    if step >= self._tick_due:
                        self._tick_due = self._inline_tick(step)
                    next_due = min(sink_due, self._tick_due)
                yield batch
                # The loop came back for the next batch: this step's compute ends here.
                t_req = boundary()
                if len(compute) < step:  # end_step() may have closed it already
                    compute_append(t_req - t_got)
        finally:
            if len(compute) < len(data):
                # GeneratorExit: the loop broke out after this step's work (CPython closes
                # the generator as the for loop drops it), so the step ends now.
                with contextlib.suppress(Exception):
                    self._sync_now()
                compute_append(clock() - t_got)
            self._end_epoch()

    def _synced_clock(self) -> float:
        """The step boundary with ``sync``: the synchronise is device work, so compute includes it."""
        clock = self._clock
        t_sync = clock()
        self._sync()
        now = clock()
        self._sync_s.append(now - t_sync)
        return now

    def _sync_now(self) -> float:
        return self._clock() if self._sync is None else self._synced_clock()

    def _begin_epoch(self, now: float) -> None:
        if self._t0 is None:
            self._t0 = self._resource_windows.origin = now
        self._open_gpu()
        self._pending = None
        self._epoch_starts.append(len(self._data))

    def _open_gpu(self) -> None:
        if self._gpu is None:
            self._gpu = open_gpu(self._gpu_spec)

    def _begin_sampling(self) -> None:
        """Tell the background sampler an epoch runs (starting its thread at the first epoch), or read inline."""
        if self._sampling or not self.sample_resources:
            return
        if self._sampler is None and not needs_thread(self._gpu, self._iterator()):
            self._open_inline()
            return
        if self._sampler is None:
            owner = weakref.ref(self)  # the thread must not keep the watch alive

            def iterator() -> Any:
                w = owner()
                return None if w is None else w._iterator()

            def steady() -> bool:
                w = owner()
                return w is not None and w._in_steady_state()

            self._sampler = BackgroundSampler(
                self._samples,
                self._gpu,
                iterator=iterator,
                steady=steady,
                interval=self.sample_interval,
                resource_interval=self.resource_interval,
                on_tick=self._resource_windows.add,
            )
            weakref.finalize(self, self._sampler.shutdown)  # a watch dropped without close() ends its thread
        self._sampler.begin_epoch()
        self._sampling = True

    def _end_epoch(self) -> None:
        if self._sampling:
            self._sampling = False
            if self._inline_open:
                self._close_inline()
            else:
                self._sampler.end_epoch()  # files the epoch's results in the background
        self._sinks.flush(self)

    # -- inline resource readings (no thread needed: NOTE [sampler and the GIL]) ---------------
    def _open_inline(self) -> None:
        if self._inline is None:
            self._inline = ResourceSampler(self.resource_interval, uss_every=8, worker_pids=list, keep_ticks=False,
                                           on_tick=self._resource_windows.add)
        at = window_clocks()
        self._inline.begin(at=at)
        step = len(self._data)
        self._tick_at = (at[0], step)
        self._tick_due = step + _FIRST_INLINE_TICK
        self._inline_open = self._sampling = True

    def _inline_tick(self, step: int) -> int:
        """Read CPU and RSS now; the step at which the next reading is due (about ``resource_interval`` on)."""
        self._inline.sample()
        now = time.perf_counter()
        then, at = self._tick_at
        self._tick_at = (now, step)
        rate = (step - at) / (now - then) if now > then else 0.0
        return step + max(1, int(rate * self.resource_interval)) if rate > 0 else step + _FIRST_INLINE_TICK

    def _close_inline(self) -> None:
        summary = self._inline.finish(at=window_clocks())
        self._samples.resources.append(summary.to_dict())
        self._inline_open = False
        self._tick_due = sys.maxsize

    def _settle(self) -> None:
        """Wait for the sampler to file the results of the ended epochs (before reporting)."""
        if self._sampler is not None:
            self._sampler.settle()

    def _in_steady_state(self) -> bool:
        """Whether the current epoch has delivered its first batch and warm-up is over (sampler thread)."""
        steps = len(self._data)
        starts = self._epoch_starts
        return bool(starts) and steps > starts[-1] and steps > self.warmup and not self._paused

    def observe(self, iterator: Any) -> None:
        """Sample this loader iterator's prefetch buffer and workers (found inside a framework's wrapper)."""
        found = find_loader_iterator(iterator)
        self._iterator = _weak(found if found is not None else iterator)

    # -- manual API (plain loops and the framework integrations) -----------------------------
    def data_start(self) -> None:
        """The loop starts waiting for data; the open step (if any) ends here.

        A wait already in progress (from :meth:`epoch_start`) keeps its start:
        the first batch of an epoch is timed from the epoch's start.
        """
        if self._t0 is None or self._gpu is None:
            self._begin_epoch(self._clock())
        if not self._sampling:
            self._begin_sampling()
        if len(self._compute) < len(self._data):
            now = self._sync_now()
            self._compute.append(now - (self._t_req[-1] + self._data[-1]))
        else:
            now = self._clock()
        if self._pending is None:
            self._pending = now
        self._paused = False

    def data_end(self) -> None:
        """The batch arrived: a step starts (its compute runs until the next ``data_start``)."""
        now = self._clock()
        if self._pending is None:
            return  # no wait was being timed (e.g. the first batch after a pause)
        self._t_req.append(self._pending)
        self._data.append(now - self._pending)
        self._pending = None
        step = len(self._data)
        if step >= self._sinks.due_after(step - 1):
            self._sinks.at_step(self, step)
        if step >= self._tick_due:
            self._tick_due = self._inline_tick(step)

    def cancel_wait(self) -> None:
        """Drop a data wait in progress (the loop went elsewhere: validation, epoch end)."""
        self._pending = None

    def end_step(self) -> None:
        """End the open step now; time until the next data request is not counted."""
        if len(self._compute) < len(self._data):
            self._compute.append(self._sync_now() - (self._t_req[-1] + self._data[-1]))

    def pause(self) -> None:
        """The loop leaves training (validation, epoch end): nothing counts until the next fetch."""
        self.end_step()
        self._pending = None
        self._paused = True  # a buffer that fills during validation says nothing about the loader

    def epoch_start(self) -> None:
        """A new epoch: the next batch counts as its first (start-up), timed from now."""
        self.end_step()
        now = self._clock()
        self._begin_epoch(now)
        self._begin_sampling()
        self._pending = now
        self._paused = False

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
        except BaseException:
            self.cancel_wait()
            raise
        self.data_end()
        return batch

    def timed(self, iterator: Iterator[Any], *, ahead: int = 0, stop_ends_wait: bool = False) -> TimedIterator:
        """``iterator`` with every ``next()`` timed as data wait (for frameworks that own the loop).

        ``ahead`` and ``stop_ends_wait``: for a consumer that fetches ahead of its loop, see :class:`TimedIterator`.
        """
        if isinstance(iterator, TimedIterator):
            return iterator
        return TimedIterator(iterator, self, ahead=ahead, stop_ends_wait=stop_ends_wait)

    def close(self) -> None:
        """Stop background sampling and flush/close the outputs (the loader is left alone)."""
        self._end_epoch()
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.close()
        self._sinks.close()
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
        return self._iterator()

    @property
    def steps(self) -> int:
        """Steps recorded so far (batches delivered)."""
        return len(self._data)

    # -- what sinks read (sinks.StepSource) --------------------------------------------------
    @property
    def closed_steps(self) -> int:
        return len(self._compute)

    def window(self, start: int, end: int) -> tuple[float, float]:
        """Sums of data wait and compute (s) over the closed steps ``[start, end)``."""
        return sum(self._data[start:end]), sum(self._compute[start:end])

    def stall_between(self, start: int, end: int | None = None) -> float | None:
        """Stall fraction of the closed steps in ``[start, end)`` (None when they took no time)."""
        end = len(self._compute) if end is None else min(end, len(self._compute))
        data, compute = self.window(start, end)
        return data / (data + compute) if data + compute > 0 else None

    def step_rows(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        """Closed steps as dicts: step, epoch, t_s (since the first request), data_ms, compute_ms, first."""
        end = len(self._compute) if end is None else end
        t0 = self._t0 or 0.0
        starts = self._epoch_starts
        rows = []
        epoch = max(0, bisect.bisect_right(starts, start) - 1)
        for i in range(start, end):
            while epoch + 1 < len(starts) and starts[epoch + 1] <= i:
                epoch += 1
            first = bool(starts) and i == starts[epoch]
            rows.append(row(i, epoch, self._t_req[i] - t0, self._data[i], self._compute[i], first))
        return rows

    def closed_windows(self, upto: int, *, final: bool) -> list[dict[str, Any]]:
        """Time windows of the steps from ``upto`` that are over (with ``final``, the open one too); see windows.py."""
        closed = len(self._compute)
        if closed <= upto or self._t0 is None:
            return []
        if not final:  # cheap test first: is the latest closed step in a later window than step ``upto``?
            last = time_windows.window_index(self._t_req[closed - 1], self._t0, self.window_s)
            if last == time_windows.window_index(self._t_req[upto], self._t0, self.window_s):
                return []
            closed = bisect.bisect_left(self._t_req, self._t0 + last * self.window_s, upto, closed)
        return self._windows(upto, closed)

    def _windows(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        if self._t0 is None:
            return []
        windows = time_windows.step_windows(self._t_req, self._data, self._compute, epoch_starts=self._epoch_starts,
                               warmup=self.warmup, origin=self._t0, window_s=self.window_s,
                               batch_size=self._batch_size, start=start, end=end)
        return time_windows.with_resources(windows, self._resource_windows)

    @property
    def rank(self) -> int | None:
        """This process's rank under torchrun (None outside a distributed job)."""
        from ..runtime.distributed import rank_info

        info = rank_info()
        return info.rank if info.is_distributed else None

    def latest_buffer(self) -> tuple[int, int] | None:
        return self._samples.latest_buffer()

    def latest_gpu_util(self) -> float | None:
        return self._samples.latest_gpu_util()

    def latest_cpu(self) -> tuple[float, float] | None:
        if not self._sampling:
            return None
        return self._inline.latest_cpu() if self._inline_open else self._sampler.latest_cpu()

    # -- results ---------------------------------------------------------------------------
    def summary(self) -> str:
        """The text of ``ss.stall_summary(w)``: verdict, stall fraction, what-if, buffer, GPU/CPU.

        Kept for loops written against 0.1; the text itself is the renderer's business."""
        from ..render.console_profile import stall_summary

        return stall_summary(self.to_dict())

    def to_dict(self, *, timeline: bool = True, context: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``profile`` section (the record schema, stallscope/schema/record-v1.json): stall fraction, verdict, what-if, occupancy, ..."""
        self._settle()
        samples = self._samples
        profile = summarize_steps(
            data_s=list(self._data),
            compute_s=list(self._compute),
            epoch_starts=list(self._epoch_starts),
            warmup=self.warmup,
            with_timeline=timeline,
        )
        profile["name"] = self.name
        profile["timing"] = dict(self.timing)
        profile["occupancy"] = occupancy_summary(list(samples.occupancy_ready), samples.occupancy_capacity)
        util = list(samples.gpu_util)
        profile["gpu_util"] = round(sum(util) / len(util), 2) if util else None
        profile["gpu"] = gpu_summary(self._gpu, util, samples.gpu_memory_max, samples.gpu_memory_total)
        profile["resources"] = merge_resources(samples.resources)
        profile["sync"] = sync_summary(self.sync_mode, list(self._sync_s), profile)
        profile["ranks"] = self._ranks
        if self._ranks:
            from ..runtime.distributed import rank_info

            profile["rank"] = rank_info().rank
        profile["distributed"] = rules.rank_report(self._ranks) if self._ranks else None
        ctx = loader_context(self._loader)
        ctx.update(context or {})
        profile.update(epoch_startup(profile, ctx.get("epoch_steps")))
        epoch_steps = ctx.get("epoch_steps")
        profile.update(time_windows.long_run_section(self._windows(), self.window_s, epoch_steps, self._batch_size))
        if profile["distributed"]:
            profile["distributed"]["windows"] = slowest_rank_per_window(self._ranks)
        recommendations = rules.advise(profile, ctx)
        profile["advice"] = rules.next_knob(profile, recommendations)
        profile["recommendations"] = recommendations
        return profile

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


def _none() -> None:
    return None


def _weak(obj: Any) -> Callable[[], Any]:
    """A weak reference where possible: holding the iterator would keep a broken-out epoch's workers alive."""
    if obj is None:
        return _none
    try:
        return weakref.ref(obj)
    except TypeError:  # e.g. a generator-like object without weakref support
        return _none


def watch(loader: Any, **options: Any) -> Watch:
    """Wrap ``loader`` to measure data stalls in your own loop: ``for batch in ss.watch(loader):``.

    The options are :class:`Watch`'s:

    - ``log_every=N``: a live line every N steps (stderr, or ``log=`` a callable/Logger).
    - ``sync="cuda"`` (or a callable): synchronise at each step boundary for honest device timing.
    - ``sample_resources``: background sampling of CPU/memory (main + workers), GPU via NVML,
      and prefetch-buffer occupancy; False turns every background thread off.
    - ``jsonl=`` / ``csv=``: per-step rows; ``tensorboard=``: a log dir or a SummaryWriter.
    - ``window_s``: time windows for long runs (default 60 s): stall, step time, CPU and memory
      per window, and the memory drift over them (``windows``, ``memory_drift`` in ``to_dict()``);
      ``windows_jsonl=`` appends each closed window to a JSON-lines file (with ``jsonl=`` alone they
      go next to it, ``run.windows.jsonl``), read back with ``stallscope.training.windows.read_windows``;
      ``batch_size``: samples per step for the per-sample rates (default: the loader's ``batch_size``).
    - further options: ``warmup`` (steps kept out of steady state), ``log``,
      ``sample_interval``, ``resource_interval``, ``gpu`` (a monitor or False), ``clock``.

    Then ``w.to_dict()`` (the profile section), ``ss.stall_summary(w)`` (text),
    ``w.gather()`` under torchrun.
    """
    return Watch(loader, **options)
