"""Child-process bookkeeping: no worker may outlive a command.

NOTE [worker shutdown]
DataLoader iterators shut their workers down when garbage-collected, but a
command can end in ways that skip that: Ctrl-C in the middle of a fetch, a
worker stuck in C code, a timeout we impose. Every command therefore ends
through :func:`reap_children`, which terminates (then kills) every descendant
of this process that is still alive. Probes that start workers also shut
their iterators down explicitly (``shutdown_iterator``) as soon as they are
done, so reaping is a safety net, not the normal path. Queue reads always
carry a timeout (DataLoader ``timeout=``), so the main process never blocks
forever on a worker.

NOTE [worker death]
A DataLoader worker that dies (``os._exit``, a segfault, the OOM killer)
surfaces in the main process in one of several ways, depending on when it is
noticed: torch's ``RuntimeError: DataLoader worker (pid(s) N) exited
unexpectedly`` from ``next()``; a ``ConnectionResetError``, ``EOFError`` or
truncated pickle from the result queue, when the worker's socket closed before
it became a zombie; or the same ``RuntimeError`` raised *asynchronously* by
torch's SIGCHLD handler, at whatever line the main thread happens to run,
including inside our own ``except`` and ``finally`` blocks. The handler raises
at most once per iterator (torch clears the iterator's pids when it raises),
and not at all once the iterator is shut down or the dead worker reaped.
So, wherever a loader is measured: :func:`stop_workers` waits briefly for a
worker to show up dead after a connection-type error, reads every worker's
exit code (``exitcode`` reaps the zombie, which disarms the handler) and shuts
the iterator down, absorbing the one asynchronous raise if it lands there;
the caller turns the failure into one sentence *after* that. The commands'
``execute`` also turns any worker-death ``RuntimeError`` that still escapes
into that sentence and exit code 2 (:func:`describe_worker_death`).

That asynchronous raise can also land where no ``except`` or ``finally`` helps: right after a
lock was taken. ``with cond:`` calls ``Condition.__enter__``, which takes the lock in C and then
runs pending signal handlers before it returns; an exception raised there leaves the lock held and
the ``with`` block never entered, so no ``__exit__`` releases it. When that is the ``notempty``
lock of a DataLoader index queue (its ``put``), the queue's feeder thread and, later, the queue's
finaliser (run by the garbage collector, at any line of the main thread) wait for it for ever: a
``bench`` over a dataset whose workers die hung there once in about 200 runs on a loaded 2-core
machine (main thread in ``Queue._finalize_close``, feeder in ``_feed``). So the commands run
under :func:`deferred_worker_deaths`: torch's handler still checks the workers at every SIGCHLD,
but its error is raised only where the main thread waits for a batch inside a queue's ``get``
(``safe_to_raise``); anywhere else it is kept and the signal sent again every 20 ms, until the
main thread waits there or the dead worker is reaped (its iterator shut down, which handles the
death itself). The thread that sends it sleeps while no death is kept: the handler wakes it
through a pipe.

One more way reaches the terminal without passing through our code: torch hands some of a
worker's tensors over as file descriptors, served by ``multiprocessing``'s resource-sharer
thread in the main process, and a worker that dies in the middle of a handover resets that
connection; the thread prints the ``ConnectionResetError`` through ``sys.excepthook``, a
traceback beside our one sentence. :func:`quiet_lost_handovers` drops exactly those.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import pickle
import re
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from typing import Any, NamedTuple, ParamSpec, TypeVar

import psutil

# Per-interpreter helpers, not workers: they exit with this process, and killing them early
# breaks what started them. multiprocessing's own (killing them only makes the next spawn
# complain; their children, workers started through a forkserver, are still reaped), and Open
# MPI's runtime daemon, which MPI_Init starts in a process that mpirun did not launch (``orted``
# before Open MPI 5, ``prted`` since): Lightning initialises mpi4py where it is installed, and
# killing that daemon aborted the process that had started it (a test process on a GPU machine
# whose image has mpi4py).
_MP_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
_MPI_DAEMONS = ("orted", "prted")

# torch's warning when a DataLoader has more workers than it suggests (a regex for
# ``warnings.filterwarnings``): stallscope runs such configs on purpose.
TORCH_WORKER_WARNING = "This DataLoader will create"


def default_start_method() -> str:
    """The start method a DataLoader with no ``multiprocessing_context`` uses here: the one set with
    ``set_start_method``, else the platform's default (without fixing the user's context for
    good)."""
    current = multiprocessing.get_start_method(allow_none=True)
    if current:
        return current
    if sys.platform in ("win32", "darwin"):
        return "spawn"
    return "forkserver" if sys.version_info >= (3, 14) else "fork"


def is_interpreter_helper(proc: psutil.Process) -> bool:
    """Whether ``proc`` is one of this interpreter's helpers (above), which no command reaps."""
    try:
        if proc.name() in _MPI_DAEMONS:
            return True
        cmdline = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return any(helper in cmdline for helper in _MP_HELPERS)


def descendants(root: psutil.Process | None = None) -> list[psutil.Process]:
    """Live child processes of ``root`` (default: this process), at any depth, except the
    interpreter's helpers (multiprocessing's, Open MPI's daemon)."""
    try:
        found = (root or psutil.Process()).children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in found if not is_interpreter_helper(p)]


def tree_cpu(
    root: psutil.Process | None = None, *, own: Callable[[], float] | None = None
) -> tuple[float, float]:
    """``(own, started)``: the CPU seconds ``root`` (default: this process) spent itself (``own()``
    where given, e.g. ``time.process_time`` less some threads), and those of every process it
    started, at any depth, the ended ones included.

    NOTE [CPU of processes that end]
    A loader's processes may end inside a measurement window: a pipeline that
    starts its worker pool for each epoch (grain's ``DataLoader``, a
    ``multiprocessing.Pool`` opened in ``__iter__``), DataLoader workers of a
    loader re-iterated epoch after epoch. Summing the live processes' CPU times
    misses what such a process spent; at ten epochs a second, most of the
    loader's CPU. On POSIX the kernel adds a process's CPU, with that of the
    processes it reaped, to its parent's "children" times when the parent reaps
    it, so a process's own times plus its children times never go down while it
    lives, and the tree's total (the root's children times plus, for every live
    descendant, its own and its children times) counts an ended process once it
    is reaped: a difference of two totals is the CPU the tree spent between them,
    a process alive at the first and reaped before the second counted from its
    first reading. The root's children times are read before and after the
    descendants, and the reading is taken again when a reap fell in between (it
    would count that process twice). A process orphaned to init is lost
    (an undercount).
    """
    me = root or psutil.Process()
    own_read = own or (lambda: sum(me.cpu_times()[:2]))
    started = 0.0
    for _ in range(3):
        try:
            before = me.cpu_times()
        except psutil.Error:
            return own_read(), 0.0
        reaped = before.children_user + before.children_system
        started = 0.0
        for proc in descendants(me):
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue  # ended between the listing and the reading: in ``reaped`` next time
            started += times.user + times.system + times.children_user + times.children_system
        try:
            after = me.cpu_times()
        except psutil.Error:
            break
        if after.children_user + after.children_system == reaped:
            return own_read(), started + reaped
        time.sleep(0.001)
    return own_read(), started + reaped


MB = 1024 * 1024


class Rollup(NamedTuple):
    """A process's pages by kind from ``/proc/PID/smaps_rollup``, in MB."""

    private_clean: float  # held by this process alone, unmodified: mostly pages of files it reads
    private_dirty: float  # held by it alone and written: its allocations, pages copied on write
    anonymous: float  # not backed by a file, shared with a parent or not

    @property
    def uss(self) -> float:
        return self.private_clean + self.private_dirty


def smaps_rollup_mb(pid: int) -> Rollup | None:
    """The :class:`Rollup` of a process (Linux 4.14 and later); None where unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            fields = dict(
                line.split(":", 1) for line in handle if ":" in line and not line[0].isdigit()
            )
        clean, dirty, anon = (
            int(fields[key].split()[0]) / 1024
            for key in ("Private_Clean", "Private_Dirty", "Anonymous")
        )
    except (OSError, KeyError, ValueError, IndexError):
        return None
    return Rollup(clean, dirty, anon)


def private_mb(proc: psutil.Process) -> tuple[float, Rollup | None]:
    """A process's USS in MB, with its :class:`Rollup` where ``smaps_rollup`` is readable: that
    file is read once (psutil's ``memory_full_info`` reads it again for the same sum). Raises
    ``psutil.Error`` for a process that is gone, ``AttributeError`` where the platform gives no
    USS."""
    rollup = smaps_rollup_mb(proc.pid)
    if rollup is not None:
        return rollup.uss, rollup
    return float(proc.memory_full_info().uss) / MB, None


def own_memory_mb(procs: list[psutil.Process]) -> dict[str, Any]:
    """The memory ``procs`` hold, summed (NOTE [the whole process tree] in resources.py): each
    process's USS where the platform gives it (pages only that process holds, so what processes
    share counts once, in none of them), else its RSS; and their RSS. ``{"own_mb", "rss_mb",
    "uss": whether every process's USS was read, "each": {pid: own_mb}}``; a process that is gone
    is left out."""
    own = rss = 0.0
    have_uss = True
    each: dict[int, float] = {}
    for proc in procs:
        try:
            value, _ = private_mb(proc)
            resident = float(proc.memory_info().rss) / MB
        except (psutil.Error, AttributeError):
            have_uss = False
            try:
                value = resident = float(proc.memory_info().rss) / MB
            except psutil.Error:
                continue
        rss += resident
        own += value
        each[proc.pid] = value
    return {"own_mb": own, "rss_mb": rss, "uss": have_uss, "each": each}


def reap_children(timeout: float = 3.0, *, exclude: set[int] | None = None) -> list[int]:
    """Terminate, then kill, every descendant still alive; return their pids."""
    procs = [p for p in descendants() if not exclude or p.pid not in exclude]
    if not procs:
        return []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=timeout)
    return [p.pid for p in procs]


# NOTE [queue feeders at exit]
# A ``multiprocessing.Queue`` writes through a feeder thread, and at interpreter exit
# multiprocessing joins that thread. A queue a pipeline's processes read from (a torchdata process
# mapper's, an engine's) can be left with a full pipe when the trial stops them: its feeder then
# blocks in ``send`` forever, and so does the exit. ``stallscope stages`` on a graph of process
# mappers printed its table, wrote its record and never exited (twice in fresh-clone runs under
# load; py-spy: ``_exit_function`` → ``Queue._finalize_join`` → the feeder in
# ``Connection._send``). When a command ends, its children are gone, nothing will read those
# pipes, so every live feeder is released (``cancel_join_thread``, the documented way to let a
# process exit without flushing a queue).


def release_queue_feeders() -> int:
    """Let the interpreter exit without joining any queue's feeder thread (NOTE [queue feeders
    at exit]); returns how many were released."""
    import gc
    from multiprocessing.queues import Queue

    released = 0
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads ``__class__``, which some objects compute
        # (torch's deprecated ``reduce_op`` warns when asked)
        if issubclass(type(obj), Queue):
            feeder = getattr(obj, "_thread", None)
            if feeder is not None and feeder.is_alive():
                with contextlib.suppress(Exception):
                    obj.cancel_join_thread()
                    released += 1
    return released


def shutdown_iterator(iterator: Any) -> None:
    """Shut a DataLoader iterator's workers down now, not at garbage collection."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        with contextlib.suppress(Exception):
            shutdown()


@contextlib.contextmanager
def no_orphans(timeout: float = 3.0) -> Iterator[None]:
    """Reap any child this block leaves behind, however it ends."""
    before = {p.pid for p in descendants()}
    try:
        yield
    finally:
        reap_children(timeout, exclude=before)


def worker_pids(iterator: Any) -> list[int]:
    """Pids of a live DataLoader iterator's workers (empty for num_workers=0)."""
    workers = getattr(iterator, "_workers", None) or []
    return [w.pid for w in workers if getattr(w, "pid", None)]


# How long a connection-type error waits for a worker to show up dead (NOTE [worker death]).
DEATH_GRACE_S = 2.0
_DEATH_TEXT = re.compile(
    r"DataLoader worker \(pids?\(?s?\)? ?([\d, ]+)\)[^\n]*(exited unexpectedly|killed "
    r"by signal|is killed)"
)


_RESOURCE_SHARER = ("multiprocessing", "resource_sharer.py")


def _from_resource_sharer(tb: Any) -> bool:
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace("\\", "/").split("/")
        if tuple(path[-2:]) == _RESOURCE_SHARER:
            return True
        tb = tb.tb_next
    return False


@contextlib.contextmanager
def quiet_lost_handovers() -> Iterator[None]:
    """While it lasts, a connection error that ``multiprocessing``'s resource-sharer thread
    reports through ``sys.excepthook`` (a worker died mid-handover: NOTE [worker death]) is
    dropped; every other exception goes to the hook as before."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if issubclass(kind, (ConnectionError, EOFError)) and _from_resource_sharer(tb):
            return
        previous(kind, value, tb)

    sys.excepthook = hook
    try:
        yield
    finally:
        if sys.excepthook is hook:
            sys.excepthook = previous


def is_worker_death(exc: BaseException) -> bool:
    """torch's own worker-death error (from ``next()`` or its SIGCHLD handler)."""
    return isinstance(exc, RuntimeError) and bool(_DEATH_TEXT.search(str(exc)))


def may_be_death(exc: BaseException) -> bool:
    """Errors that a worker dying mid-message produces in the main process."""
    return is_worker_death(exc) or isinstance(
        exc, (ConnectionError, EOFError, pickle.UnpicklingError)
    )


def dead_workers(iterator: Any) -> list[tuple[int, int]]:
    """(pid, exit code) of a DataLoader iterator's workers that exited abnormally.

    Reading ``exitcode`` reaps a dead worker, which disarms torch's SIGCHLD
    handler for it (NOTE [worker death]).
    """
    dead = []
    for worker in getattr(iterator, "_workers", None) or []:
        code = getattr(worker, "exitcode", None)
        if code not in (None, 0):
            dead.append((worker.pid, code))
    return dead


def _await_death(iterator: Any, grace: float) -> list[tuple[int, int]]:
    until = time.monotonic() + grace
    while True:
        dead = dead_workers(iterator)
        left = until - time.monotonic()
        if dead or left <= 0:
            return dead
        sentinels = [
            w.sentinel for w in getattr(iterator, "_workers", None) or [] if w.exitcode is None
        ]
        if not sentinels:
            return dead
        wait(sentinels, timeout=min(left, 0.1))


def stop_workers(
    iterator: Any, failure: BaseException | None = None, *, grace: float = DEATH_GRACE_S
) -> list[tuple[int, int]]:
    """Shut a DataLoader iterator down; return its workers that died (NOTE [worker death]).

    After a ``failure`` that a dying worker could have caused, wait up to
    ``grace`` seconds for the worker to show up dead, so the error can name it.
    """
    dead: list[tuple[int, int]] = []
    for _ in range(3):  # torch's SIGCHLD handler raises at most once per iterator
        try:
            if failure is not None and not dead:
                dead = _await_death(iterator, grace if may_be_death(failure) else 0.0)
            shutdown_iterator(iterator)
            return dead
        except Exception:
            continue
    return dead


def describe_worker_death(
    dead: list[tuple[int, int]] | None, where: str = "", exc: BaseException | None = None
) -> str:
    """One sentence for a dead worker: pid, exit code or signal, and what to do next.

    ``dead`` comes from :func:`stop_workers`; when it is empty, torch's own
    message in ``exc`` (pid and exit code or signal) is used instead.
    """
    advice = "run `stallscope check` or num_workers=0 to see the failing sample."
    if dead:
        pid, code = dead[0]
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        hint = " (signal 9 is usually the out-of-memory killer)" if code == -9 else ""
        return f"a DataLoader worker died{where}: pid {pid}, {how}{hint}; {advice}"
    match = _DEATH_TEXT.search(str(exc or ""))
    if match:
        detail = match.group(0).split(". ")[0].rstrip(".")
        return f"a DataLoader worker died{where}: {detail}; {advice}"
    return f"a DataLoader worker died unexpectedly{where}; {advice}"


_P = ParamSpec("_P")
_R = TypeVar("_R")


# -- worker deaths raised where they are safe (NOTE [worker death]) ------------------------------

# Where the main thread blocks waiting for data: a signal interrupts the wait there, and raising
# leaves no lock taken (the callers' ``with`` and ``finally`` blocks are entered).
_SAFE_WAITS = frozenset(
    {
        ("selectors.py", "select"),
        ("connection.py", "wait"),
        ("connection.py", "poll"),
        ("connection.py", "_poll"),
        ("connection.py", "recv"),
        ("connection.py", "recv_bytes"),
        ("connection.py", "_recv"),
        ("connection.py", "_recv_bytes"),
        ("threading.py", "wait"),
    }
)
# ... inside the get of a multiprocessing queue (batches from workers) or a queue.Queue (from the
# pin-memory thread).
_QUEUE_GETS = frozenset({("queues.py", "get"), ("queue.py", "get")})
_MAX_DEPTH = 12
# How often a kept worker death is offered again, and for how long at most.
RETRY_S = 0.02
GIVE_UP_S = 30.0


def _where(frame: Any) -> tuple[str, str]:
    return os.path.basename(frame.f_code.co_filename), frame.f_code.co_name


def safe_to_raise(frame: Any) -> bool:
    """Whether the main thread, stopped at ``frame``, waits for a batch inside a queue's ``get``:
    the only place a worker-death error is raised asynchronously (NOTE [worker death])."""
    if frame is None or _where(frame) not in _SAFE_WAITS:
        return False
    for _ in range(_MAX_DEPTH):
        if frame is None:
            return False
        if _where(frame) in _QUEUE_GETS:
            return True
        frame = frame.f_back
    return False


def _child_unreaped(pid: int) -> bool:
    """Whether ``pid`` is still a child of this process (``WNOWAIT``: a zombie stays one)."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    except OSError:
        return True
    return True


def _unreaped(exc: BaseException) -> bool:
    """Whether a dead worker the error names is still an unreaped child of this process (its
    iterator not shut down); True where the error names no pid."""
    match = _DEATH_TEXT.search(str(exc))
    pids = [int(p) for p in re.findall(r"\d+", match.group(1))] if match else []
    return not pids or any(_child_unreaped(pid) for pid in pids)


class DeferredDeaths:
    """A SIGCHLD handler around torch's: a worker-death error torch raises is re-raised only where
    ``safe_to_raise``, else kept and offered again every ``RETRY_S`` by signalling the main thread
    (NOTE [worker death]). No locks: it may run nested in itself or in any code of the main
    thread. So it wakes its resending thread with a byte written to a pipe (``os.write`` takes no
    Python lock), and only when it keeps a death: the rest of the time that thread sleeps in
    ``poll`` and costs the process being measured nothing."""

    def __init__(
        self,
        torch_handler: Callable[[int, Any], Any],
        main_thread: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        alive: Callable[[BaseException], bool] = _unreaped,
    ) -> None:
        self.torch_handler = torch_handler
        self.main_thread = main_thread
        self.clock = clock
        self.alive = alive
        self.kept: list[tuple[BaseException, float]] = []
        self.raised = 0
        self.wakeups = 0  # times the resending thread woke (a test reads it)
        self._stopping = False
        self._wake: tuple[int, int] | None = None
        self._resender: threading.Thread | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        try:
            self.torch_handler(signum, frame)
        except RuntimeError as exc:
            if not is_worker_death(exc):
                raise
            self.kept.append((exc, self.clock()))
            self._wake_resender()
        if not self.kept:
            return
        now = self.clock()
        self.kept = [(e, t) for e, t in self.kept if now - t < GIVE_UP_S and self.alive(e)]
        if self.kept and safe_to_raise(frame):
            death, _ = self.kept.pop(0)
            self.raised += 1
            raise death

    def start(self) -> None:
        """The thread that offers kept errors again (started here, never inside the handler)."""
        read, write = os.pipe()
        for end in (read, write):
            os.set_blocking(end, False)
        self._wake = (read, write)
        self._resender = threading.Thread(
            target=self._resend, args=(read,), name="stallscope-worker-deaths", daemon=True
        )
        self._resender.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake_resender()
        if self._resender is not None:
            self._resender.join(timeout=1.0)
        if self._wake is not None and (self._resender is None or not self._resender.is_alive()):
            for end in self._wake:
                os.close(end)
            self._wake = None

    def _wake_resender(self) -> None:
        if self._wake is not None:
            with contextlib.suppress(OSError):  # the pipe is full: it is awake already
                os.write(self._wake[1], b"\0")

    def _resend(self, wake: int) -> None:
        poller = select.poll()  # not select(): no limit on the descriptor's number
        poller.register(wake, select.POLLIN)
        while not self._stopping:
            # Asleep until the handler keeps a death; then awake every RETRY_S while one is kept.
            ready = poller.poll(RETRY_S * 1000 if self.kept else None)
            self.wakeups += 1
            if ready:
                with contextlib.suppress(OSError):
                    os.read(wake, 4096)
            if self.kept and not self._stopping:
                with contextlib.suppress(Exception):
                    signal.pthread_kill(self.main_thread, signal.SIGCHLD)


@contextlib.contextmanager
def deferred_worker_deaths() -> Iterator[DeferredDeaths | None]:
    """While it lasts, torch's worker-death error is raised only where the main thread waits for
    a batch (NOTE [worker death]); yields the handler, or None where nothing was changed (not the
    main thread, no SIGCHLD). Imports torch."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGCHLD"):
        yield None
        return
    try:
        from torch.utils.data._utils import signal_handling
    except ImportError:
        yield None
        return

    signal_handling._set_SIGCHLD_handler()  # torch's own first, so that it is the one wrapped
    previous = signal.getsignal(signal.SIGCHLD)
    if isinstance(previous, DeferredDeaths) or not callable(previous):  # already in force
        yield previous if isinstance(previous, DeferredDeaths) else None
        return
    deaths = DeferredDeaths(previous, threading.get_ident())
    signal.signal(signal.SIGCHLD, deaths)
    deaths.start()
    try:
        yield deaths
    finally:
        deaths.stop()
        signal.signal(signal.SIGCHLD, previous)


def safe_from_worker_deaths(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """``function`` run under :func:`deferred_worker_deaths`: the library's entry points that
    iterate loaders (``ss.bench``, ``ss.tune``, ``ss.check``, ``ss.stages``), as the commands do."""

    @functools.wraps(function)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with deferred_worker_deaths():
            return function(*args, **kwargs)

    return run
