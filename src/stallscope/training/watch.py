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

The per-step record (clock readings only, waits and compute derived when
asked) is :mod:`.steps`; outputs while the loop runs go through
:mod:`.sinks`, which read it through :mod:`.readings`; background sampling
lives in :mod:`.sampling`; the
``profile`` section is built when asked, by :mod:`.profile_section` (from
:mod:`.summary`, and the time windows for long runs of :mod:`.windows`);
the exchange across ranks under torchrun is :mod:`.gather`. The watch records
measurements only: the verdict, the advice and the text summary are analysis and
rendering, on the library surface (``ss.watch`` returns :class:`stallscope.api.Watch`,
whose ``to_dict()`` is judged and which adds ``recommendations()``, ``advice()`` and
``summary()``; ``ss.stall_summary(w)`` is ``stallscope.render.console_profile``).

NOTE [watch hot path]
    Per step the wrapped loop pays two clock reads, two ``array('d')``
    appends (the clock when the batch arrives, and when the loop comes back
    for the next one: :mod:`.steps` derives waits and compute from them
    later), one increment and one integer comparison with the next step
    at which a sink is due (``sys.maxsize`` with no sink: the null sink
    never comes due). Nothing on that path branches on an option: the step
    boundary is a plain clock read, or a synchronising one chosen once per
    epoch; sinks and the inline resource readings (a single-process loader
    without a GPU: no sampler thread, NOTE [sampler and the GIL] in
    sampling.py) are reached only through the due-step comparison; a sampler
    thread, where one is needed, runs at a low rate and never touches the loop. Anything
    added here is paid on every step of every user's training run; measure
    it with benchmarks/watch_overhead.py: the per-step cost on a Python list
    (``--hot-path``; budget 1 µs) and the end-to-end overhead (SPEC §7: ≤ 1%
    on in-memory data).
"""

from __future__ import annotations

import contextlib
import sys
import time
import weakref
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import UsageError
from . import gather as ranks
from . import windows as time_windows
from .profile_section import profile_section
from .readings import WatchReadings
from .sampling import (
    BackgroundSampler,
    InlineReadings,
    Samples,
    find_loader_iterator,
    needs_thread,
    none,
    open_gpu,
    weak_getter,
)
from .sinks import open_sinks
from .steps import StepTimes
from .timing import SyncSpec, TimedIterator, resolve_sync

__all__ = ["FETCH_TIMING", "SyncSpec", "TimedIterator", "Watch", "resolve_sync"]

Clock = Callable[[], float]

# How the data wait was timed, for the record (``timing.method``).
FETCH_TIMING = "fetch"


class Watch(WatchReadings):
    """Wraps an iterable loader and records data wait vs compute per step. See the module docstring.

    Users create one with ``ss.watch(loader, ...)`` (:class:`stallscope.api.Watch`, where the
    options are documented). Iterating it iterates the loader (one epoch per ``for`` loop);
    ``len()`` and unknown attributes go to the loader.
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
        self.resource_interval = min(
            resource_interval, window_s / 4
        )  # a few memory readings in every window
        self._sync, self.sync_mode = resolve_sync(sync)
        self._clock = clock
        self.window_s = float(window_s)
        self._resource_windows = time_windows.ResourceWindows(
            self.window_s
        )  # the sampler folds its readings in here
        batch_size = batch_size or getattr(
            loader, "batch_size", None
        )  # samples per step, for per-sample rates
        self._batch_size = batch_size if isinstance(batch_size, int) and batch_size > 0 else None
        self._sinks = open_sinks(
            log_every=log_every,
            log=log,
            tensorboard=tensorboard,
            jsonl=jsonl,
            csv=csv,
            windows_jsonl=windows_jsonl,
        )
        # How the waits are timed; an integration that must fall back to hook gaps says so here.
        self.timing: dict[str, Any] = {"method": FETCH_TIMING, "note": None}
        self._gpu_spec = gpu
        self._gpu: Any = None
        self._steps = StepTimes()  # per step: clock readings; waits and compute derived when asked
        self._sync_s = array("d")
        self._epoch_starts: list[int] = []
        self._pending: float | None = None  # manual API: a data wait in progress since this time
        self._paused = False  # manual API: the loop left training (validation); samplers skip
        self._samples = Samples()
        self._sampler: BackgroundSampler | None = (
            None  # started at the first epoch, kept until close()
        )
        self._sampling = (
            False  # the sampler is told an epoch is in progress (or the inline window is open)
        )
        # Resources read on the loop's own thread when no thread is needed (NOTE
        # [sampler and the GIL]).
        self._inline: Any = None  # InlineReadings, from the first epoch read inline
        self._inline_open = False
        self._tick_due = sys.maxsize  # the step at which the inline reading is due
        self._t0: float | None = None
        self._ranks: list[dict[str, Any]] | None = None
        self._iterator: Callable[[], Any] = none

    # -- iteration (the hot path, NOTE [watch hot path]) ------------------------------------
    def __iter__(self) -> Iterator[Any]:
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        clock = self._clock
        boundary = clock if self._sync is None else self._synced_clock
        steps = self._steps
        request, deliver = steps.requested.append, steps.delivered.append
        step = first = steps.steps
        self._open_gpu()  # NVML start-up is not data wait
        request(clock())  # iter() is part of the first wait: worker start-up lands in first_batch_s
        try:
            self._begin_epoch(steps.requested[-1])
            iterator = iter(self._loader)
            self.observe(iterator)
            self._begin_sampling()
            sink_due = self._sinks.due_after(step)
            next_due = min(sink_due, self._tick_due)
            for batch in iterator:  # FOR_ITER: no next() call to look up per step
                deliver(clock())
                step += 1
                if step >= next_due:
                    if step >= sink_due:
                        sink_due = self._sinks.at_step(self, step)
                    if step >= self._tick_due:
                        self._tick_due = self._inline.tick(step)
                    next_due = min(sink_due, self._tick_due)
                yield batch
                # The loop came back for the next batch: this request also ends the step's compute.
                request(boundary())
        finally:
            if steps.end_run(first):
                # GeneratorExit: the loop broke out after this step's work (CPython closes
                # the generator as the for loop drops it), so the step ends now.
                with contextlib.suppress(Exception):
                    self._sync_now()
                steps.end_last(clock())
            self._end_epoch()

    def _synced_clock(self) -> float:
        """The step boundary with ``sync``: the synchronise is device work, so compute includes
        it."""
        clock, sync = self._clock, self._sync
        assert sync is not None  # this clock is chosen only when there is a synchronise
        t_sync = clock()
        sync()
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
        self._epoch_starts.append(self._steps.steps)

    def _open_gpu(self) -> None:
        if self._gpu is None:
            self._gpu = open_gpu(self._gpu_spec)

    def _begin_sampling(self) -> None:
        """Tell the background sampler an epoch runs (starting its thread at the first epoch), or
        read inline."""
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
            weakref.finalize(
                self, self._sampler.shutdown
            )  # a watch dropped without close() ends its thread
        self._sampler.begin_epoch()
        self._sampling = True

    def _end_epoch(self) -> None:
        if self._sampling:
            self._sampling = False
            if self._inline_open:
                self._close_inline()
            elif self._sampler is not None:
                self._sampler.end_epoch()  # files the epoch's results in the background
        self._sinks.flush(self)

    # -- inline resource readings (no thread needed: NOTE [sampler and the GIL]) ---------------
    def _open_inline(self) -> None:
        if self._inline is None:
            self._inline = InlineReadings(
                self.resource_interval, on_tick=self._resource_windows.add
            )
        self._tick_due = self._inline.begin(self._steps.steps)
        self._inline_open = self._sampling = True

    def _close_inline(self) -> None:
        self._samples.resources.append(self._inline.finish())
        self._inline_open = False
        self._tick_due = sys.maxsize

    def _settle(self) -> None:
        """Wait for the sampler to file the results of the ended epochs (before reporting)."""
        if self._sampler is not None:
            self._sampler.settle()

    def _in_steady_state(self) -> bool:
        """Whether the current epoch has delivered its first batch and warm-up is over (sampler
        thread)."""
        steps = self._steps.steps
        starts = self._epoch_starts
        return bool(starts) and steps > starts[-1] and steps > self.warmup and not self._paused

    def observe(self, iterator: Any) -> None:
        """Sample this loader iterator's prefetch buffer and workers (found inside a framework's
        wrapper)."""
        found = find_loader_iterator(iterator)
        self._iterator = weak_getter(found if found is not None else iterator)

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
        if self._steps.last_open():
            now = self._sync_now()
            self._steps.end_last(now)
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
        self._steps.add(self._pending, now)
        self._pending = None
        step = self._steps.steps
        if step >= self._sinks.due_after(step - 1):
            self._sinks.at_step(self, step)
        if step >= self._tick_due:
            self._tick_due = self._inline.tick(step)

    def cancel_wait(self) -> None:
        """Drop a data wait in progress (the loop went elsewhere: validation, epoch end)."""
        self._pending = None

    def end_step(self) -> None:
        """End the open step now; time until the next data request is not counted."""
        if self._steps.last_open():
            self._steps.end_last(self._sync_now())

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

    def timed(
        self, iterator: Iterator[Any], *, ahead: int = 0, stop_ends_wait: bool = False
    ) -> TimedIterator:
        """``iterator`` with every ``next()`` timed as data wait (for frameworks that own the loop).

        ``ahead`` and ``stop_ends_wait``: for a consumer that fetches ahead of its loop, see
        :class:`TimedIterator`.
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

    # -- results ---------------------------------------------------------------------------
    def to_dict(
        self, *, timeline: bool = True, context: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The ``profile`` section's measurements (the record schema,
        stallscope/schema/record-v1.json): stall fraction, what-if, occupancy, ... (the verdict is
        analysis: ``analysis.training.judged_profile``, which ``ss.watch``'s watch applies).

        Built by :func:`~.profile_section.profile_section`; ``timeline`` adds the
        per-step timeline, ``context`` what the caller knows about the run (target, config, epoch
        length).
        """
        self._settle()
        return profile_section(
            name=self.name,
            data_s=self._data,
            compute_s=self._compute,
            epoch_starts=self._epoch_starts,
            warmup=self.warmup,
            timing=self.timing,
            samples=self._samples,
            gpu=self._gpu,
            sync_mode=self.sync_mode,
            sync_s=self._sync_s,
            ranks=self._ranks,
            loader=self._loader,
            windows=self._windows(),
            window_s=self.window_s,
            batch_size=self._batch_size,
            timeline=timeline,
            context=context,
        )

    def gather(self) -> dict[str, Any]:
        """Exchange per-rank summaries under torch.distributed; every rank must call it.

        Returns :meth:`to_dict` with ``ranks`` (one entry per rank) and
        ``distributed`` (the slowest rank, the maximum exposed data wait);
        see :mod:`.gather`. Outside a distributed job it returns ``to_dict()`` with one rank.
        """
        self._ranks = ranks.exchange(self.to_dict(timeline=False))
        return self.to_dict()
