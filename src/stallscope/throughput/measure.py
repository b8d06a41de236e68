"""Steady-state throughput of one loader configuration (SPEC §3.1).

How a number is taken, and why:

* **Start-up is separate.** The clock starts before ``iter(loader)`` (which
  starts the workers) and stops at the first batch: that is ``startup_s``.
  It never enters the rate.
* **The prefetch buffer cannot inflate the rate.** A loader's workers hold up
  to ``num_workers × prefetch_factor`` batches in flight; the ones that were
  ready at start-up arrive almost at once. We first consume a warm-up of at
  least that many batches plus one round per worker, and only then open the
  measurement window. The consumer never idles, so the buffer cannot refill
  behind our back during the window.
* **No epoch boundary in the window.** :class:`CyclingBatches` walks the
  user's own epochs (their sampler or batch sampler, re-iterated) as often as
  needed, so worker restarts at epoch ends (their own cost, reported as
  start-up) do not dilute steady state.
* **Samples are the batches' own.** A batch counts the indices the sampler put
  in it (NOTE [loader fidelity] in ``pipeline/arguments.py``): batches of a
  token-budget batch sampler vary in size, and ``batches_per_s`` is reported
  alongside. Only an iterable dataset (no indices) is counted from the batch's
  leading dimension. With ``in_order=False`` a batch may overtake another; the
  count per batch is then that of the index list drawn at its place, which
  leaves the window's total right but for the few batches in flight at its edges.
* **Every part of the epoch, every config at the same part.** A measurement can open its
  window at a chosen point of the user's epoch (NOTE [window position]); repeats move that point
  through the epoch, and all configs of one repeat open at the same one.
* **Windows of a second or more.** The window closes after ``min_window_s``
  and at least ``min_batches`` batches (or ``max_window_s``), and the rate is
  samples delivered in the window over the window's length.
* **Repeats, interleaved.** :func:`measure_interleaved` runs configs in
  A B … B A order per repeat, so drift and order effects hit all of them alike.
* **Delivered where training reads it.** With a CUDA device, each batch is copied to it and the
  copy waited for, inside the timing (NOTE [delivered to the device]).

NOTE [delivered to the device]: a training loop on a GPU copies every batch there before its
step can start, so the rate that matters is batches on the device, and ``pin_memory`` is the knob
that buys a faster copy (a pageable copy is staged through a driver buffer by the main thread; a
pinned one runs at the link's speed: on an H200, 15 GiB/s against 50 GiB/s for a 64 MiB batch,
``benchmarks/results/cuda_paths.json``). A measurement that stops at the host counts the pin
thread's cost and none of its gain: there, pinning can only lose. So where torch sees a CUDA
device, every measured batch is copied to it (``non_blocking`` when the config pins memory) and
synchronised, and only then does the clock read; the record's ``host.gpu`` says where that was.
Without one, nothing changes.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import LoaderConfig
from ..errors import (
    NOT_TRIED,
    NoFirstBatch,
    PipelineError,
    describe_exception,
    worker_traceback_tail,
)
from ..pipeline.kinds import CopiedLoaderKind, close_trial
from ..pipeline.loaders import (
    CyclingBatches,
    EpochCycle,
    build_loader,
    close_threads,
    quiet_worker_warning,
)
from ..pipeline.structure import batch_length, to_device, token_counter
from ..pipeline.threaded import noted_index, without_notes
from ..runtime.host import cuda_available
from ..runtime.processes import (
    describe_worker_death,
    is_worker_death,
    may_be_death,
    stop_workers,
    worker_pids,
)
from ..runtime.resources import ResourceSampler, ResourceSummary
from ..stats import quantile, spread_point
from ..target import Pipeline

# Draws in the cycling sampler: far more than any window needs.
_CYCLE_TOTAL = 10**9


@dataclass
class Measurement:
    """One repeat of one configuration."""

    config: LoaderConfig
    samples_per_s: float = 0.0
    batches_per_s: float = 0.0
    startup_s: float = 0.0
    batch_ms: list[float] = field(default_factory=list)  # steady-state waits in next()
    window_s: float = 0.0
    batches: int = 0
    samples: int = 0
    tokens_per_s: float | None = None
    # token batches (pipeline/structure.py token_counter): tokens in the window
    tokens: int | None = None
    warmup_batches: int = 0
    exhausted: bool = False  # an iterable dataset ended before the window was full
    resources: ResourceSummary | None = None
    error: str | None = None
    # CPU seconds the main process's receiving threads (the main thread, and the pin-memory thread
    # where there is one) spent over the window: receiving and deserialising (NOTE [receive cost]).
    main_cpu_s: float | None = None
    # CPU seconds the whole loader spent over the window: this process (all threads) and its
    # children (the workers); None where a child ended within the window (NOTE [receive cost]).
    loader_cpu_s: float | None = None
    # Epochs too short for a steady state (NOTE [epoch restarts]): the rate includes start-up.
    startup_included: bool = False
    # Epochs that ended within the window (a re-iterated loader, NOTE [epoch restarts]): the
    # median samples and batches of a whole epoch (None without one), and the median seconds an
    # epoch start added beyond the steady-state time of the batches delivered meanwhile (its
    # start-up's cost per epoch; 0 where the rate already includes it; None without one).
    epoch_samples: int | None = None
    epoch_batches: int | None = None
    restart_s: float | None = None
    # Where in the user's epoch the window opened, as a share of it (NOTE [window position]);
    # None where the cycle was not positioned (no position asked, or no index lists to rotate).
    epoch_position: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "samples_per_s": self.samples_per_s,
            "batches_per_s": self.batches_per_s,
            "startup_s": self.startup_s,
            "window_s": self.window_s,
            "batches": self.batches,
            "samples": self.samples,
            "tokens": self.tokens,
            "tokens_per_s": self.tokens_per_s,
            "warmup_batches": self.warmup_batches,
            "exhausted": self.exhausted,
            "resources": self.resources.to_dict() if self.resources else None,
            "error": self.error,
            "main_cpu_s": self.main_cpu_s,
            "loader_cpu_s": self.loader_cpu_s,
            "epoch_samples": self.epoch_samples,
            "epoch_batches": self.epoch_batches,
            "restart_s": self.restart_s,
            "epoch_position": self.epoch_position,
        }


def restart_burst(config: LoaderConfig) -> int:
    """Batches of a re-iterated epoch kept off the clock after its first one.

    NOTE [epoch restarts]
    A loader re-iterated for steady state (its epochs end: a stream, a factory's loader) starts
    its workers again at each epoch. The wait for the new epoch's first batch is start-up and
    stays off the clock, but the workers do not idle meanwhile: each fills its prefetch slots,
    so up to ``num_workers × prefetch_factor`` batches were made during that wait and arrive at
    once after it. Counting them on the clock would credit start-up's work to the steady state,
    most where epochs are short and workers many (8 workers over 12-batch epochs read 5–10× their
    real rate). So they pass off the clock too, as the first epoch's warm-up does; an epoch shorter
    than that has no steady state, and the rate of whole epochs, start-up included, is taken.
    """
    if config.num_workers == 0:
        return 0
    return config.num_workers * (config.prefetch_factor or 2) - 1


def warmup_batches_for(config: LoaderConfig) -> int:
    """Batches to consume before the window: the whole prefetch buffer plus one round per worker."""
    if config.num_workers == 0:
        return 2
    return config.num_workers * (config.prefetch_factor or 2) + config.num_workers + 1


def measure(
    pipeline: Pipeline,
    config: LoaderConfig,
    *,
    min_window_s: float = 1.0,
    max_window_s: float = 10.0,
    min_batches: int = 8,
    warmup_batches: int | None = None,
    timeout: float = 60.0,
    sample_resources: bool = False,
    seed: int = 0,
    settle_s: float = 0.0,
    main_step: Callable[[Any], Any] | None = None,
    device: Any = None,
    epoch_position: float | None = None,
) -> Measurement:
    """Measure ``config``'s steady-state rate on ``pipeline`` (see the module docstring).

    ``epoch_position`` (a share of the epoch, 0 to 1) opens the window at that point of the user's
    epoch (NOTE [window position]); None starts the cycle at the epoch's beginning.

    ``settle_s`` idles after the first batch, as a training loop does while it
    builds or compiles its model: the prefetch buffer fills up meanwhile, and
    the warm-up must drain it before the window opens. ``seed`` orders a shuffle
    only where the user gave neither a sampler nor a generator.

    ``main_step`` runs on every batch in this process, inside the timing, as a training loop would
    (the code-change probes move per-batch work here: NOTE [applied code changes]). Each batch is
    then copied to ``device`` (default: the CUDA device where there is one; NOTE [delivered to the
    device]).

    Raises :class:`PipelineError` when the pipeline itself fails (the dataset
    raises in a worker, a worker dies, no batch within ``timeout``).
    """
    dead: list[tuple[int, int]] = []
    try:
        return _measure(
            pipeline,
            config,
            min_window_s=min_window_s,
            max_window_s=max_window_s,
            min_batches=min_batches,
            warmup_batches=warmup_batches,
            timeout=timeout,
            sample_resources=sample_resources,
            seed=seed,
            settle_s=settle_s,
            dead=dead,
            main_step=chain_steps(main_step, delivery_step(config, device)),
            epoch_position=epoch_position,
        )
    except PipelineError:
        raise
    except Exception as exc:
        # The workers are shut down by now (NOTE [worker death]): nothing can interrupt this.
        raise _as_pipeline_error(exc, config, timeout, dead) from exc


def _measure(
    pipeline: Pipeline,
    config: LoaderConfig,
    *,
    min_window_s: float,
    max_window_s: float,
    min_batches: int,
    warmup_batches: int | None,
    timeout: float,
    sample_resources: bool,
    seed: int,
    settle_s: float,
    dead: list[tuple[int, int]],
    main_step: Callable[[Any], Any] | None = None,
    epoch_position: float | None = None,
) -> Measurement:
    result = Measurement(config=config)
    warmup = warmup_batches_for(config) if warmup_batches is None else warmup_batches
    result.warmup_batches = warmup
    sizes: deque[int] = deque()  # samples per batch, from the index lists the sampler yields
    loader = build_loader(
        pipeline, config, cycle=_CYCLE_TOTAL, sizes=sizes, timeout=timeout, seed=seed
    )
    if epoch_position is not None:
        # The first batch and the warm-up come before the window (NOTE [window position]).
        result.epoch_position = position_window(loader, epoch_position, before=warmup + 1)
    resources: ResourceSampler | None = None
    iterator = None
    failure: BaseException | None = None
    previous_threads = _set_threads(config.torch_threads)
    try:
        start = time.perf_counter()
        with quiet_worker_warning():
            iterator = iter(loader) if not _cycles_itself(pipeline) else EpochCycle(loader)
        try:
            batch = _next(iterator)
        except Exception as exc:
            if config.num_workers > 0 and _timed_out(exc):
                raise NoFirstBatch(_no_batch_sentence(config, timeout)) from exc
            raise
        if batch is _END:
            raise PipelineError(f"the loader yielded no batch with {config.label()}.")
        first = time.perf_counter()
        count_tokens = token_counter(batch)
        result.startup_s = first - start
        if settle_s > 0:
            time.sleep(settle_s)
        stamps = [first]
        # Per whole epoch seen: (samples, batches). The first is counted from the trial's first
        # batch where the cycle began at an epoch's start (NOTE [the first epoch]).
        whole: list[tuple[int, int]] = []
        count = _count(sizes, batch)
        head: list[int] | None = [count, 1] if result.epoch_position is None else None
        del batch
        burst = 0  # batches of a new epoch still to pass off the clock (NOTE [epoch restarts])
        for _ in range(warmup):
            warm = _next(iterator)
            if warm is _END:
                break
            fresh = getattr(iterator, "fresh", False)
            burst = restart_burst(config) if fresh else max(0, burst - 1)
            if main_step is not None:
                main_step(warm)
            count = _count(sizes, warm)
            del warm
            head = _first_epoch(head, whole, count, fresh)
            stamps.append(time.perf_counter())
        if sample_resources:
            pids = worker_pids(iterator)
            resources = ResourceSampler(0.2, worker_pids=(lambda: pids) if pids else None).start()
        receive_cpu = receiving_cpu_clock(iterator)
        # The resource sampler's thread is ours, not the loader's: its CPU is left out.
        loader_cpu = LoaderCpuClock(exclude=[getattr(resources, "_thread", None)])
        cpu_start = receive_cpu()
        window_start = time.perf_counter()
        last = window_start
        samples = tokens = 0
        paused = 0.0  # waits for a new epoch's first batch, re-iterating a loader that ended
        waits: list[float] = []
        # Every sample, batch, token and epoch start in the window, for the fallback.
        epoch_samples = epoch_batches = epoch_tokens = restarts = 0
        short = False  # epochs too short for a steady state (NOTE [epoch restarts])
        # Per epoch start in the window: [seconds off the clock, samples delivered meanwhile].
        boundaries: list[list[float]] = []
        epoch: list[int] | None = None  # [samples, batches] since the last epoch start
        restarting = False
        while True:
            batch = _next(iterator)
            if main_step is not None and batch is not _END:
                batch = main_step(batch)
            now = time.perf_counter()
            if batch is _END:
                result.exhausted = True
                break
            fresh = getattr(iterator, "fresh", False)
            count = _count(sizes, batch)
            epoch_samples += count
            epoch_batches += 1
            restarts += int(fresh)
            counted_tokens = count_tokens(batch) if count_tokens is not None else 0
            epoch_tokens += counted_tokens
            del batch
            head = _first_epoch(head, whole, count, fresh)
            if fresh:
                if epoch is not None:
                    whole.append((epoch[0], epoch[1]))
                epoch = [0, 0]
                boundaries.append([0.0, 0.0])
                restarting = True
            if epoch is not None:
                epoch[0] += count
                epoch[1] += 1
            if fresh or burst > 0:
                # Start-up of the next epoch, reported apart from the steady state as the first
                # epoch's is (a short stream would otherwise be timed on its prefetched batches).
                paused += now - last
                burst = restart_burst(config) if fresh else burst - 1
                if restarting:
                    boundaries[-1][0] += now - last
                    boundaries[-1][1] += count
            else:
                restarting = False
                samples += count
                tokens += counted_tokens
                waits.append(now - last)
            last = now
            wall = now - window_start
            if restarts >= 3 and wall >= min_window_s:
                # Fewer batches an epoch than twice its start-up burst: what is left is no steady
                # state either (its batches were made during the burst's wait too).
                short = epoch_batches < 2 * (restart_burst(config) + 1) * restarts
                if short:
                    break
            elapsed = wall - paused
            if (
                (elapsed >= min_window_s and len(waits) >= min_batches)
                or elapsed >= max_window_s
                or wall >= 2 * max_window_s
            ):
                break
        result.window_s = last - window_start - paused
        if short or (not waits and restarts and last > window_start):
            # The epochs end inside their start-up (NOTE [epoch restarts]): their rate, start-up
            # included, is the only one there is.
            result.startup_included = True
            result.window_s = last - window_start
            samples, tokens = epoch_samples, epoch_tokens
            waits = [(last - window_start) / epoch_batches] * epoch_batches
        _epoch_figures(result, whole, boundaries, samples)
        if not whole and epoch_batches and not _cycles_itself(pipeline):
            _cycled_epoch(result, loader, epoch_samples / epoch_batches)
        result.main_cpu_s = max(0.0, receive_cpu() - cpu_start)
        result.loader_cpu_s = loader_cpu.elapsed()
        result.batches = len(waits)
        result.samples = samples
        result.tokens = tokens if count_tokens is not None else None
        result.batch_ms = [w * 1000 for w in waits]
        if result.window_s > 0:
            result.samples_per_s = samples / result.window_s
            if count_tokens is not None:
                result.tokens_per_s = tokens / result.window_s
            result.batches_per_s = len(waits) / result.window_s
    except BaseException as exc:
        failure = exc
        raise
    finally:
        if failure is None and resources is not None:
            result.resources = resources.stop()  # the window's figures, before the workers stop
        if iterator is not None:
            dead.extend(stop_workers(iterator, failure))
        if not pipeline.kind.rebuilds_from_parts:
            close_trial(loader, iterator)
        close_threads(loader)
        if failure is not None and resources is not None:
            result.resources = resources.stop()
        _set_threads(previous_threads)
    return result


_END = object()

# NOTE [window position]
# A window is a slice of the epoch, not a sample of it. The cycle used to begin at the epoch's
# first batch and the window to open after the warm-up, so every repeat of a config timed the same
# index range, and configs with other warm-ups (a deeper prefetch buffer) timed another one. Where
# the cost of an item depends on which item it is (a slow replica, large images, long
# sequences), that is a bias no number of rounds reveals: rounds agree because they time the same
# items. On the jittery pipeline of ``benchmarks/tuner_pipelines.py`` (5% of fixed indices stall
# 100 ms, 11 workers, 2 cores; ``benchmarks/results/window_position.json``) in-order delivery at
# prefetch 4 timed 1,577 samples/s in 0.75 s windows and 1,414 in 1 s windows, out-of-order
# delivery 1,524 and 1,566; over whole epochs of a persistent loader the two ran 1,157 and 1,348.
# The race, in 0.75 s windows, had ranked them the wrong way round, once 99.6% sure (the
# calibration run at 1ce114f). So a measurement can open its window at a chosen share of the
# epoch: the cycle passes over that many index lists less the first batch and the warm-up, so
# every config opens at the same batch whatever its warm-up, and repeats move that point through
# the epoch (``stats.spread_point``: evenly spread, the first at the start), as a loop's epochs
# cover every part of it. Index lists are cheap to pass over; an epoch longer than ``MAX_SKIP``
# of them is entered within its first ``MAX_SKIP``. A loader stallscope does not cycle itself (an
# iterable dataset, a stream, an adapter's own loader) is not positioned: ``epoch_position`` stays
# None.

MAX_SKIP = 20_000


def cycling_batches(loader: Any) -> CyclingBatches | None:
    """The cycle of index lists a trial loader draws from, where stallscope built one."""
    for name in ("batch_sampler", "sampler"):
        found = getattr(loader, name, None)
        if isinstance(found, CyclingBatches):
            return found
    return None


def position_window(loader: Any, position: float, *, before: int) -> float | None:
    """Start ``loader``'s cycle so that, after ``before`` batches, its next one lies ``position``
    (a share) into the epoch; the share it will open at, or None where nothing can be positioned
    (NOTE [window position])."""
    cycling = cycling_batches(loader)
    length = None if cycling is None else cycling.epoch_length()
    if cycling is None or not length:
        return None
    share = position % 1.0
    if length <= MAX_SKIP:
        target = int(share * length)
        cycling.start = (target - before) % length
    else:
        cycling.start = int(share * MAX_SKIP)
        target = cycling.start + before
    return target / length


def _cycled_epoch(result: Measurement, loader: Any, per_batch: float) -> None:
    """The user's epoch where stallscope walked its epochs one after another without a pause
    (``CyclingBatches``): the window saw no epoch start, but a training loop re-iterating the
    loader starts its workers again at each (NOTE [per-epoch rate] in ``tuning/epoch_cost.py``).
    Its length is the user's batch sampler's: its indices where a ``BatchSampler`` says, else its
    index lists at ``per_batch`` samples a batch, as measured (a window of part epochs holds more
    or fewer short last lists than an epoch: 2,001 samples for 2,000). The start-up cost is left
    to the measured start-up. Nothing is recorded where the length is not known."""
    cycling = cycling_batches(loader)
    batches = None if cycling is None else cycling.epoch_length()
    if cycling is None or not batches:
        return
    result.epoch_batches = batches
    result.epoch_samples = cycling.epoch_samples() or round(batches * per_batch)


# NOTE [the first epoch]
# An epoch's length comes from the whole epochs a trial sees, and one between two epoch starts
# needs a window of more than an epoch. A pipeline whose start-up fills its buffers with most of an
# epoch (grain's DataLoader: each of 8 workers reads ahead hundreds of records during a 15 s start)
# then delivers the rest of it from those buffers in a fraction of a second, and the next epoch
# starts the same way: no window held two epoch starts, so no trial knew the epoch's length, the
# per-epoch rate never decided, and the tuner picked 8 workers for their drained-buffer rate
# (about 3,000 samples/s) over a loop that ran 10x slower with them. Where the trial's cycle began
# at an epoch's first batch (not positioned in it), the batches up to the first epoch start are
# that whole epoch, first batch and warm-up included: it is counted from there.


def _first_epoch(
    head: list[int] | None, whole: list[tuple[int, int]], count: int, fresh: bool
) -> list[int] | None:
    """Count one more batch of ``count`` samples toward the first epoch (``head``: [samples,
    batches] since the trial's first batch, None once it ended or where it is not counted); at
    the next epoch's first batch (``fresh``), the first epoch is whole (NOTE [the first epoch])."""
    if head is None:
        return None
    if fresh:
        whole.append((head[0], head[1]))
        return None
    head[0] += count
    head[1] += 1
    return head


def _epoch_figures(
    result: Measurement,
    whole: Sequence[tuple[int, int]],
    boundaries: Sequence[Sequence[float]],
    steady_samples: int,
) -> None:
    """An epoch's length (from the whole epochs in the window) and its start-up's cost (from the
    epoch starts in it).

    An epoch start costs the wait off the clock less what the batches delivered meanwhile would
    have taken at the steady rate (they were made during the wait: NOTE [epoch restarts]); an
    epoch then takes that cost plus its samples at the steady rate, which is what a training loop
    over such epochs sees. Where the rate already includes the start-ups (epochs too short for a
    steady state) the cost is 0."""
    if whole:
        result.epoch_samples = int(statistics.median(s for s, _ in whole))
        result.epoch_batches = int(statistics.median(b for _, b in whole))
    if result.startup_included:
        result.restart_s = 0.0
        return
    if not boundaries or result.window_s <= 0 or steady_samples <= 0:
        return
    rate = steady_samples / result.window_s
    result.restart_s = statistics.median(max(0.0, off - n / rate) for off, n in boundaries)


class LoaderCpuClock:
    """CPU seconds this process and every process it started (the loader's workers, a pool it
    opens, at any depth) spend from now on.

    Processes born after the clock starts count from birth, and those that end before
    ``elapsed()`` with all they spent (NOTE [CPU of processes that end] in runtime/processes.py):
    a loader that starts its workers each epoch is clocked whole. CPU time, unlike wall time,
    does not count the time other processes on the machine held the cores: it is what the
    loader's configuration costs.
    """

    def __init__(self, exclude: Sequence[Any] = ()) -> None:
        self._excluded = [
            clock for clock in (_thread_clock(t) for t in exclude) if clock is not None
        ]
        try:
            self._start: float | None = self._now()
        except Exception:  # psutil.Error: this process's /proc unreadable
            self._start = None

    def _own(self) -> float:
        return time.process_time() - sum(_clock_seconds(c) for c in self._excluded)

    def _now(self) -> float:
        from ..runtime.processes import tree_cpu

        own, started = tree_cpu(own=self._own)
        return own + started

    def elapsed(self) -> float | None:
        if self._start is None:
            return None
        try:
            return max(0.0, self._now() - self._start)
        except Exception:  # psutil.Error
            return None


def _thread_clock(thread: Any) -> int | None:
    """The CPU clock id of a live thread (Linux), else None."""
    ident = getattr(thread, "ident", None)
    if not ident or not hasattr(time, "pthread_getcpuclockid"):
        return None
    try:
        return time.pthread_getcpuclockid(ident)
    except (OSError, ValueError):
        return None


def _clock_seconds(clock_id: int) -> float:
    try:
        return time.clock_gettime(clock_id)
    except OSError:  # the thread ended
        return 0.0


def receiving_cpu_clock(iterator: Any) -> Callable[[], float]:
    """A clock of the CPU seconds the main process spends receiving batches.

    NOTE [receive cost]
    With workers, the main process receives every batch: it unpickles it (rebuilding tensors
    from shared memory), reorders and frees it. That work runs in the main thread, or in the
    pin-memory thread where ``pin_memory`` is on; its CPU time per batch bounds what the main
    process can receive (the "main-process" ceiling of ``analysis/ceiling.py``). Process CPU
    time would count the resource sampler's thread too, so only these threads are clocked.
    """
    thread = getattr(iterator, "_pin_memory_thread", None)
    clock_id = None
    if (
        thread is not None
        and getattr(thread, "ident", None)
        and hasattr(time, "pthread_getcpuclockid")
    ):
        try:
            clock_id = time.pthread_getcpuclockid(thread.ident)
        except (OSError, ValueError):
            clock_id = None
    if clock_id is None:
        return time.thread_time

    def clock() -> float:
        try:
            return time.thread_time() + time.clock_gettime(clock_id)
        except OSError:  # the pin thread ended
            return time.thread_time()

    return clock


def _cycles_itself(pipeline: Pipeline) -> bool:
    """Whether the trial loader must be re-iterated for steady state: kinds whose index lists
    stallscope cannot cycle (NOTE [loader kinds]), and streams, whatever builds them."""
    from torch.utils.data import IterableDataset

    kind = pipeline.kind
    if isinstance(pipeline.dataset, IterableDataset):
        # A stream ends where it ends, often after a few batches (a shard per worker): timed on
        # one pass, the window would hold little more than the prefetched batches. Re-iterated,
        # each epoch's start-up off the clock (NOTE [epoch restarts]).
        return True
    if kind.rebuilds_from_parts:
        return False
    if isinstance(kind, CopiedLoaderKind):
        # A copy's batch sampler is cycled in place (``_kind_trial``); without one (automatic
        # batching off) the copy is iterated epoch after epoch.
        return kind.loader.batch_sampler is None
    return True


def delivery_step(config: LoaderConfig, device: Any = None) -> Callable[[Any], Any] | None:
    """Per batch: copy it to ``device`` and wait for the copy; None where there is no device
    (``device`` None and no CUDA). NOTE [delivered to the device]. The batch itself is returned
    unchanged: samples and tokens are counted on the host."""
    import torch

    if device is None:
        if not cuda_available():
            return None
        device = torch.device("cuda")
    device = torch.device(device)
    non_blocking = bool(config.pin_memory)

    def deliver(batch: Any) -> Any:
        to_device(batch, device, non_blocking=non_blocking)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return batch

    return deliver


def chain_steps(*steps: Callable[[Any], Any] | None) -> Callable[[Any], Any] | None:
    """The steps given, run in order on each batch (each gets what the one before returned)."""
    present = [step for step in steps if step is not None]
    if len(present) <= 1:
        return present[0] if present else None

    def chained(batch: Any) -> Any:
        for step in present:
            batch = step(batch)
        return batch

    return chained


def _count(sizes: deque[int], batch: Any) -> int:
    """Samples in the batch just received: its index list's length, in sampler order."""
    if sizes:
        return sizes.popleft()
    return batch_length(batch) if batch is not None else 0


def _next(iterator: Any) -> Any:
    try:
        return next(iterator)
    except StopIteration:
        return _END


def _set_threads(n: int | None) -> int | None:
    if n is None:
        return None
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    return previous


def _timed_out(exc: BaseException) -> bool:
    """torch's ``DataLoader(timeout=...)`` ran out waiting for a batch."""
    return "timed out after" in str(exc)


def _no_batch_sentence(config: LoaderConfig, timeout: float) -> str:
    return (
        f"no batch arrived within {timeout:g} s with {config.label()}; a sample may hang "
        "(run `stallscope check` to find which)."
    )


def _as_pipeline_error(
    exc: Exception, config: LoaderConfig, timeout: float, dead: list[tuple[int, int]] | None = None
) -> PipelineError:
    """One sentence for a failure inside the user's pipeline (wrapped worker errors included)."""
    text = str(exc)
    # A worker that died without a Python exception (os._exit, a segfault, the OOM killer) can
    # surface as a broken connection rather than torch's own message; where the dead worker was
    # not seen in time (NOTE [worker death]), such an error with workers, and no worker traceback
    # forwarded with it (the dataset's own), is that death all the same.
    lost = config.num_workers > 0 and may_be_death(exc) and worker_traceback_tail(exc) is None
    if dead or is_worker_death(exc) or lost:
        return PipelineError(describe_worker_death(dead, f" with {config.label()}", exc))
    if _timed_out(exc):
        return PipelineError(_no_batch_sentence(config, timeout))
    # Worker threads name the index that raised (NOTE [worker threads]).
    index = noted_index(text) or noted_index("\n".join(getattr(exc, "__notes__", None) or []))
    find = "run `stallscope check` to find the index" if index is None else f"the index was {index}"
    tail = worker_traceback_tail(exc)
    if tail is not None:
        last, worker_id = tail
        if index is not None:  # the note is the last line; the exception is the line before it
            last = [line.strip() for line in without_notes(text).splitlines() if line.strip()][-1]
        worker = f" (worker {worker_id})" if worker_id else ""
        return PipelineError(
            f"the dataset raised {last}{worker} while loading with {config.label()}; {find}."
        )
    if index is not None:
        return PipelineError(
            f"dataset[{index}] raised {describe_exception(exc)} while loading with "
            f"{config.label()}."
        )
    return PipelineError(f"loading with {config.label()} failed: {describe_exception(exc)}.")


def measure_interleaved(
    pipeline: Pipeline,
    configs: Sequence[LoaderConfig],
    *,
    repeats: int = 3,
    on_result: Callable[[int, int, Measurement], None] | None = None,
    failures: dict[int, PipelineError] | None = None,
    **measure_kwargs: Any,
) -> list[list[Measurement]]:
    """Measure every config ``repeats`` times in A B … B A order; results per config.

    ``on_result(config_index, repeat, measurement)`` is called after each run
    (progress bars, early stopping by raising). With ``failures``, a config whose pipeline fails
    (:class:`PipelineError`: the dataset raises only in workers, a worker dies) is recorded there
    by index and left out of the later repeats, and the others go on; without it the error
    propagates.
    """
    results: list[list[Measurement]] = [[] for _ in configs]
    order = list(range(len(configs)))
    for rep in range(repeats):
        # Every config of a repeat at the same point of the epoch (NOTE [window position]).
        position = spread_point(rep)
        for index in order if rep % 2 == 0 else reversed(order):
            if failures is not None and index in failures:
                continue
            try:
                m = measure(pipeline, configs[index], epoch_position=position, **measure_kwargs)
            except PipelineError as exc:
                if failures is None:
                    raise
                failures[index] = exc
                if isinstance(exc, NoFirstBatch):
                    _skip_worker_configs(pipeline, configs, index, results, failures)
                continue
            results[index].append(m)
            if on_result is not None:
                on_result(index, rep, m)
    return results


# NOTE [no first batch]
# A config with workers whose first batch never came waited the whole timeout (60 s by default)
# for it. When that happens the cause is rarely the worker count: a sample that hangs, a worker
# start that blocks, or workers forked from a process whose library threads they need (a native
# runtime started when this process iterated the pipeline: NOTE [fork after use] in
# ``checks/fork_control.py``) hang at every count. A sweep of 1, 2, 4 and 8 workers paid four
# timeouts to learn that once (four minutes on a Daft DataFrame's loader). So after the first such
# config the sweep tries no other config with workers that has not been measured already, and
# each says why; the user's own config is still tried (its failure is the command's error), and
# configs that did deliver keep their rates.


def is_baseline(pipeline: Pipeline, config: LoaderConfig) -> bool:
    """Whether ``config`` is the user's own (equal, or labelled the same)."""
    return config == pipeline.baseline or config.label() == pipeline.baseline.label()


def _skip_worker_configs(
    pipeline: Pipeline,
    configs: Sequence[LoaderConfig],
    hung: int,
    results: list[list[Measurement]],
    failures: dict[int, PipelineError],
) -> None:
    """Mark the worker configs not measured yet as not tried (NOTE [no first batch])."""
    label = configs[hung].label()
    for index, config in enumerate(configs):
        if (
            config.num_workers > 0
            and index not in failures
            and not results[index]
            and not is_baseline(pipeline, config)
        ):
            failures[index] = PipelineError(
                f"{NOT_TRIED}{label} gave no first batch within its timeout, so no other "
                "config with worker processes was tried (each would wait as long)."
            )


# -- summaries -----------------------------------------------------------------------


def spread(values: Sequence[float]) -> dict[str, float]:
    """``{median, min, max}`` of repeated figures."""
    if not values:
        return {"median": 0.0, "min": 0.0, "max": 0.0}
    arr = np.asarray(values, dtype=float)
    return {"median": float(np.median(arr)), "min": float(arr.min()), "max": float(arr.max())}


def latency_stats(batch_ms: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max/std/mean of per-batch waits (ms)."""
    if not batch_ms:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0, "std": 0.0, "mean": 0.0}
    arr = np.asarray(batch_ms, dtype=float)
    ordered = sorted(float(v) for v in batch_ms)
    p50, p95, p99 = (quantile(ordered, q, ordered=True) or 0.0 for q in (0.5, 0.95, 0.99))
    return {
        "p50": p50,
        "p95": p95,
        "p99": p99,
        "max": float(arr.max()),
        "std": float(arr.std()),
        "mean": float(arr.mean()),
    }


def histogram(batch_ms: Sequence[float], bins: int = 30) -> dict[str, list[float]]:
    if not batch_ms:
        return {"edges": [], "counts": []}
    counts, edges = np.histogram(np.asarray(batch_ms, dtype=float), bins=bins)
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def relative_spread(values: Sequence[float]) -> float:
    """(max − min) / median: the noise a result states about itself."""
    s = spread(values)
    return (s["max"] - s["min"]) / s["median"] if s["median"] > 0 else math.inf
