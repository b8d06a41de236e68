"""Background sampling of CPU and memory for the main process and its workers (SPEC §3.6).

CPU % comes from differences of each process's CPU times between ticks
(100 % = one core busy), so it is exact over the window rather than an
average of instantaneous readings. USS (private memory) needs
``/proc/PID/smaps``, which is costly to read, so it is sampled every
``uss_every`` ticks only.

NOTE [CPU from the window start]
A process's CPU times count from its birth, and DataLoader workers are born
long before a measurement window opens (start-up, warm-up). Each worker's CPU
is therefore counted from a baseline taken when the window opens: ``start()``
reads the CPU time of every descendant alive then; a process first seen later
counts from zero only when it was born inside the window, and from its CPU
time at that first sight when it is older (an undercount, never an overcount).
Counting from birth made 2 workers on a 2-core machine read 245 %. With the
baseline, main + workers cannot exceed the usable cores × 100 % beyond the
kernel's clock-tick granularity: nothing is clamped, the arithmetic is right.

NOTE [the whole process tree]
Every process the loader starts is the loader's: DataLoader workers, the pool
a worker (or a pipeline) starts inside itself, an engine's worker processes.
With no known worker pids every descendant of the root counts; where the
workers are known (a DataLoader iterator's) the processes they started count
with them, at any depth. A pipeline's threads live in the main process and are
in its CPU and memory. The memory checks of graph and pool pipelines read the
same tree (NOTE [pipeline checks] in checks/pipeline_checks.py), and the
DataLoader memory probe reads each worker with the processes it started
(``checks/memory_worker.py``), both through ``processes.own_memory_mb``.

NOTE [memory a process made]
RSS counts every resident page a process maps, and a memory-mapped dataset
(NumPy's memmap, Arrow files under Hugging Face datasets, a TensorDict on
disk) adds its file's pages as it reads them: a worker reading a 1.6 GB file
in order rose from 203 MB to 1,361 MB of RSS in 40 s, and its USS with it
when it read alone, with no byte allocated. Those pages are the kernel's page
cache, given back under pressure. So besides RSS and USS every tick reads
what a process made: its anonymous memory (RSS less the file and shared
memory pages: statm's resident less shared) and, with USS, its private dirty
pages (``smaps_rollup``), which a page copied on write raises and a page read
from a file does not. The watch's memory drift is judged on those two
(``analysis/drift.py``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from .processes import private_mb

MB = 1024 * 1024
# psutil derives creation times from the boot time in whole seconds: only a process
# older than the window by more than this is known to be older.
_CREATE_TIME_SLACK_S = 1.0
_TREE_EVERY_S = 1.0  # how often the processes the known workers started are looked up


@dataclass
class ResourceTick:
    """Totals at one sampling instant."""

    t: float  # seconds since the sampler started
    main_cpu_percent: float
    workers_cpu_percent: float
    main_rss_mb: float
    workers_rss_mb: float
    n_workers: int
    worker_uss_mb: list[float] | None = None  # per worker, on the ticks that read USS
    # per worker, in the order of ``worker_pids`` (their worker ids); None for a worker that has
    # exited (its memory is gone, not 0 MB)
    worker_rss_mb: list[float | None] | None = None
    # per worker as worker_rss_mb, None where unreadable
    worker_uss_each: list[float | None] | None = None
    # RSS less the pages of files and shared memory mapped (NOTE [memory a process made]): the
    # main process's, and per worker as worker_rss_mb
    main_anon_mb: float | None = None
    worker_anon_mb: list[float | None] | None = None
    # per worker on the ticks that read USS: the private pages it wrote (Private_Dirty)
    worker_dirty_each: list[float | None] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Peaks:
    """The window's peaks so far (``uss``: None until a tick reads it)."""

    main_rss: float = 0.0
    workers_rss: float = 0.0
    uss: float | None = None
    n: int = 0


@dataclass
class ResourceSummary:
    """The window's figures: mean CPU %, peak memory."""

    main_cpu_percent: float = 0.0
    workers_cpu_percent: float = 0.0
    main_rss_mb: float = 0.0
    workers_rss_mb: float = 0.0
    worker_uss_mb: float | None = None  # peak of the mean private memory per worker
    n_workers: int = 0
    seconds: float = 0.0
    ticks: list[ResourceTick] = field(default_factory=list)

    def to_dict(self, *, timeline: bool = False) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "ticks"}
        for key in (
            "main_cpu_percent",
            "workers_cpu_percent",
            "main_rss_mb",
            "workers_rss_mb",
            "seconds",
        ):
            data[key] = round(data[key], 2)
        if data["worker_uss_mb"] is not None:
            data["worker_uss_mb"] = round(data["worker_uss_mb"], 2)
        if timeline:
            data["timeline"] = [t.to_dict() for t in self.ticks]
        return data


class ResourceSampler:
    """Samples the root process (default: this one) and its descendants in a thread.

    ``worker_pids`` optionally narrows "workers" to known pids (e.g. a
    DataLoader iterator's; None while they are not known yet); by default
    every descendant counts. Use as a context manager or ``start()`` /
    ``stop()``, or drive it from a thread of your own: ``begin()``,
    ``sample()`` per tick, ``finish()``.

    ``keep_ticks`` keeps every tick of a window (``ResourceSummary.ticks``);
    without it only the latest is kept, so a window that stays open for days
    holds constant memory. ``on_tick(perf_counter, tick)`` hears every tick
    (the watch folds them into its time windows).
    """

    def __init__(
        self,
        interval: float = 0.25,
        *,
        uss_every: int = 4,
        root_pid: int | None = None,
        worker_pids: Callable[[], list[int] | None] | None = None,
        keep_ticks: bool = True,
        on_tick: Callable[[float, ResourceTick], None] | None = None,
    ) -> None:
        self.interval = interval
        self.uss_every = max(1, uss_every)
        self.root = psutil.Process(root_pid or os.getpid())
        self._own = _OwnProcess() if self.root.pid == os.getpid() else None
        self._worker_pids = worker_pids
        self._keep_ticks = keep_ticks
        self._on_tick = on_tick
        self._latest: ResourceTick | None = None
        self._procs: dict[int, psutil.Process] = {}
        self._cpu_first: dict[int, float] = {}
        self._cpu_last: dict[int, float] = {}
        self._prev_cpu: dict[int, float] = {}
        self._ticks: list[ResourceTick] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._at_start: dict[int, float] = {}  # pid -> CPU seconds when the window opened
        self._prev_t = 0.0
        self._peak = _Peaks()
        self._main_cpu0 = 0.0
        self._n_ticks = 0
        self._tree: tuple[tuple[int, ...], float, tuple[int, ...]] | None = None
        self._tree0: float | None = None  # CPU of the root's descendants when the window opened

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> ResourceSampler:
        """Open the window and sample every ``interval`` seconds in a thread of its own."""
        self.begin()
        self._thread = threading.Thread(target=self._run, name="stallscope-resources", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> ResourceSummary:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        return self.finish()

    def begin(self, at: tuple[float, float] | None = None) -> ResourceSampler:
        """Open a window without a thread: the caller then calls :meth:`sample` and :meth:`finish`
        itself.

        A sampler can open one window after another (one per epoch); each starts afresh.
        ``at``: ``(time.perf_counter(), time.process_time())`` read by this process
        when the window really opened (the loop's thread at an epoch's start),
        when the sampler's thread gets to it later.
        """
        self._cpu_first, self._cpu_last, self._prev_cpu = {}, {}, {}
        self._ticks = []
        self._latest = None
        self._peak = _Peaks()
        self._n_ticks = 0
        self._started, self._main_cpu0 = (
            at if at is not None else (time.perf_counter(), self._main_cpu())
        )
        self._prev_t = self._started
        self._prev_cpu[self.root.pid] = self._main_cpu0
        # Every process alive now, with its CPU time: the baselines (NOTE [CPU from the window
        # start]). Known workers are enough; while they are unknown (None), every descendant is
        # read.
        known = self._worker_pids() if self._worker_pids is not None else None
        alive = (
            self._workers(known) if known is not None else self._workers() + _descendants(self.root)
        )
        self._at_start = {proc.pid: _cpu_seconds(proc) for proc in alive}
        # With every descendant counting, the window's total also counts the processes that end
        # inside it (NOTE [CPU of processes that end] in processes.py); ticks miss what a process
        # spent after its last one.
        self._tree0 = None if self._worker_pids is not None else self._started_cpu()
        return self

    def _started_cpu(self) -> float | None:
        """CPU seconds of every process the root started, the ended ones included."""
        from .processes import tree_cpu

        try:
            return tree_cpu(self.root, own=lambda: 0.0)[1]
        except psutil.Error:
            return None

    def sample(self) -> None:
        """One tick (USS on every ``uss_every``-th)."""
        self._n_ticks += 1
        self._tick(read_uss=(self._n_ticks % self.uss_every == 0))

    def finish(self, at: tuple[float, float] | None = None) -> ResourceSummary:
        """Close the window: a last tick, then the window's figures.

        ``at``: as for :meth:`begin`, the clocks read when the window really closed.
        """
        self._tick(read_uss=False)
        end, end_cpu = at if at is not None else (time.perf_counter(), self._main_cpu())
        elapsed = max(1e-9, end - self._started)
        main_cpu = (end_cpu - self._main_cpu0) / elapsed * 100
        workers_cpu = (
            sum(self._cpu_last[p] - self._cpu_first[p] for p in self._cpu_last) / elapsed * 100
        )
        tree = self._started_cpu() if self._tree0 is not None else None
        if tree is not None and self._tree0 is not None:
            # Never below what the ticks saw: a process orphaned to init is lost to the total.
            workers_cpu = max(workers_cpu, (tree - self._tree0) / elapsed * 100)
        return ResourceSummary(
            main_cpu_percent=main_cpu,
            workers_cpu_percent=workers_cpu,
            main_rss_mb=self._peak.main_rss,
            workers_rss_mb=self._peak.workers_rss,
            worker_uss_mb=self._peak.uss,
            n_workers=self._peak.n,
            seconds=elapsed,
            ticks=list(self._ticks),
        )

    def latest(self) -> ResourceTick | None:
        """The most recent tick of the window (None before the first), for live displays."""
        return self._latest

    def latest_cpu(self) -> tuple[float, float] | None:
        """``(main, workers)`` CPU % of the most recent tick, for live lines."""
        tick = self.latest()
        return None if tick is None else (tick.main_cpu_percent, tick.workers_cpu_percent)

    def __enter__(self) -> ResourceSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.summary = self.stop()

    # -- sampling ----------------------------------------------------------------
    def _workers(self, pids: list[int] | None = None) -> list[psutil.Process]:
        if pids is None and self._worker_pids is not None:
            pids = self._with_descendants(self._worker_pids() or [])
        elif pids is None:
            try:
                pids = [p.pid for p in self.root.children(recursive=True)]
            except psutil.Error:
                pids = []
        procs = []
        for pid in pids:
            proc = self._procs.get(pid)
            if proc is None:
                with contextlib.suppress(psutil.Error):
                    proc = psutil.Process(pid)
                    self._procs[pid] = proc
            if proc is not None:
                procs.append(proc)
        return procs

    def _with_descendants(self, pids: list[int]) -> list[int]:
        """``pids`` and every process they started, at any depth (a pool a DataLoader worker
        starts is the loader's too: NOTE [the whole process tree]). The tree is read again at
        most every ``_TREE_EVERY_S``: a scan reads every process's status."""
        now = time.perf_counter()
        known = tuple(pids)
        cached = self._tree
        if cached is not None and cached[0] == known and now - cached[1] < _TREE_EVERY_S:
            return list(cached[2])
        out = list(pids)
        seen = set(pids)
        for pid in pids:
            proc = self._procs.get(pid)
            try:
                children = (proc or psutil.Process(pid)).children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                if child.pid not in seen:
                    seen.add(child.pid)
                    out.append(child.pid)
        self._tree = (known, now, tuple(out))
        return out

    def _main_cpu(self) -> float:
        own = self._own
        return own.cpu_seconds() if own is not None and own.current() else _cpu_seconds(self.root)

    def _main_memory(self) -> tuple[float, float | None]:
        """The main process's ``(RSS, anonymous)`` MB."""
        own = self._own
        memory: tuple[float, float | None] | None = (
            own.memory_mb() if own is not None and own.current() else None
        )
        if memory is None:
            memory = _memory_mb(self.root)
        return memory if memory is not None else (0.0, None)

    def _baseline(self, proc: psutil.Process, cpu: float) -> None:
        """Where a worker's CPU starts counting (NOTE [CPU from the window start])."""
        if proc.pid in self._at_start:
            first = self._at_start[proc.pid]  # alive when the window opened
        elif _born_before(
            proc, time.time() - (time.perf_counter() - self._started) - _CREATE_TIME_SLACK_S
        ):
            # older than the window but not seen at its start: count from now (never more)
            first = cpu
        else:
            first = 0.0  # born inside the window: all its CPU is the window's
        self._cpu_first[proc.pid] = first
        self._cpu_last[proc.pid] = max(cpu, first)
        self._prev_cpu[proc.pid] = first

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def _tick(self, *, read_uss: bool) -> None:
        now = time.perf_counter()
        dt = max(1e-9, now - self._prev_t)
        self._prev_t = now
        main_cpu = self._main_cpu()
        main_pct = (main_cpu - self._prev_cpu.get(self.root.pid, main_cpu)) / dt * 100
        self._prev_cpu[self.root.pid] = main_cpu
        main_rss, main_anon = self._main_memory()
        workers_pct = 0.0
        workers_rss = 0.0
        uss: list[float] = []
        rss_each: list[float | None] = []
        anon_each: list[float | None] = []
        uss_each: list[float | None] = []
        dirty_each: list[float | None] = []
        workers = self._workers()
        for proc in workers:
            cpu = _cpu_seconds(proc)
            if cpu <= 0.0 and not proc.is_running():
                continue
            if proc.pid not in self._cpu_first:
                self._baseline(proc, cpu)
            self._cpu_last[proc.pid] = max(cpu, self._cpu_last[proc.pid])
            workers_pct += (cpu - self._prev_cpu[proc.pid]) / dt * 100
            self._prev_cpu[proc.pid] = cpu
            rss, anon = _memory_mb(proc) or (None, None)
            if rss is not None:
                workers_rss += rss
            rss_each.append(_round(rss))
            anon_each.append(_round(anon))
            if read_uss:
                value, dirty = _private_mb(proc)
                uss_each.append(_round(value))
                dirty_each.append(_round(dirty))
                if value is not None:
                    uss.append(value)
        self._peak.main_rss = max(self._peak.main_rss, main_rss)
        self._peak.workers_rss = max(self._peak.workers_rss, workers_rss)
        self._peak.n = max(self._peak.n, len(workers))
        if uss:
            mean_uss = sum(uss) / len(uss)
            self._peak.uss = mean_uss if self._peak.uss is None else max(self._peak.uss, mean_uss)
        tick = ResourceTick(
            t=round(now - self._started, 4),
            main_cpu_percent=round(main_pct, 1),
            workers_cpu_percent=round(max(0.0, workers_pct), 1),
            main_rss_mb=round(main_rss, 1),
            workers_rss_mb=round(workers_rss, 1),
            n_workers=len(workers),
            worker_uss_mb=[round(u, 1) for u in uss] if read_uss else None,
            worker_rss_mb=rss_each,
            worker_uss_each=uss_each if read_uss else None,
            main_anon_mb=_round(main_anon),
            worker_anon_mb=anon_each,
            worker_dirty_each=dirty_each if read_uss else None,
        )
        self._latest = tick
        if self._keep_ticks:
            self._ticks.append(tick)
        if self._on_tick is not None:
            self._on_tick(now, tick)


def window_clocks() -> tuple[float, float]:
    """``(time.perf_counter(), time.process_time())`` now: where a window opens or closes
    (``at``)."""
    return time.perf_counter(), time.process_time()


class _OwnProcess:
    """This process's CPU time and RSS, read without opening a file per reading.

    The sampler runs in a thread of the training process, and every blocking
    call it makes hands the GIL back and forth with the training loop
    (NOTE [sampler and the GIL] in stallscope/training/sampling.py); psutil
    opens, reads and closes a /proc file per reading. Here CPU time is
    ``time.process_time()`` (all threads, user + system: what psutil sums) and
    RSS one ``pread`` of an already open ``/proc/PID/statm``. Where that file
    does not exist (macOS, Windows), RSS falls back to psutil.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._fd: int | None = None
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self._page_mb = os.sysconf("SC_PAGE_SIZE") / MB
            self._fd = os.open(f"/proc/{self.pid}/statm", os.O_RDONLY)
            weakref.finalize(self, os.close, self._fd)

    def current(self) -> bool:
        """False in a forked child: the numbers would be the parent's."""
        return os.getpid() == self.pid

    @staticmethod
    def cpu_seconds() -> float:
        return time.process_time()

    def memory_mb(self) -> tuple[float, float] | None:
        """``(RSS, anonymous)``: statm's resident pages, less its shared ones (file and shared
        memory pages)."""
        if self._fd is None:
            return None
        try:
            fields = os.pread(self._fd, 128, 0).split()
            resident, shared = int(fields[1]), int(fields[2])
        except (OSError, ValueError, IndexError):
            return None
        return resident * self._page_mb, (resident - shared) * self._page_mb


def _descendants(root: psutil.Process) -> list[psutil.Process]:
    try:
        children: list[psutil.Process] = root.children(recursive=True)
        return children
    except psutil.Error:
        return []


def _born_before(proc: psutil.Process, wall: float) -> bool:
    try:
        created: float = proc.create_time()
        return created < wall
    except psutil.Error:
        return False


def _cpu_seconds(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
        seconds: float = times.user + times.system
        return seconds
    except psutil.Error:
        return 0.0


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _memory_mb(proc: psutil.Process) -> tuple[float, float | None] | None:
    """``(RSS, anonymous)`` MB: the RSS less the pages of files and shared memory (None where the
    platform does not say). None for a process that is gone or has exited: an exited worker not
    yet reaped (a zombie) reads 0 bytes, which is no memory reading (a leaking worker's last
    window would read as a fall)."""
    try:
        info = proc.memory_info()
    except psutil.Error:
        return None
    if info.rss <= 0:
        return None
    shared = getattr(info, "shared", None)
    return info.rss / MB, (info.rss - shared) / MB if shared is not None else None


def _private_mb(proc: psutil.Process) -> tuple[float | None, float | None]:
    """``(USS, private dirty)`` MB, as :func:`_memory_mb` for a process that is gone (dirty:
    None without ``smaps_rollup``)."""
    try:
        uss, rollup = private_mb(proc)
    except (psutil.Error, AttributeError):
        return None, None
    if uss <= 0:
        return None, None
    return uss, None if rollup is None else rollup.private_dirty
