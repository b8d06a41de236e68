"""torch's worker-death error is raised only where the main thread waits for a batch (NOTE [worker
death] in runtime/processes.py): where it lands on frames, a fake torch handler and a fake clock;
then real signals from a real child process registered with torch as a DataLoader worker."""

from __future__ import annotations

import multiprocessing
import queue
import sys
import threading
import time

import pytest

from stallscope.runtime.processes import (
    GIVE_UP_S,
    DeferredDeaths,
    deferred_worker_deaths,
    safe_to_raise,
)

DEATH = "DataLoader worker (pid 4242) exited unexpectedly with exit code 3."

# Functions named as the standard library's, compiled under its file names: the frames
# ``safe_to_raise`` reads are (file name, function name).
_LIBRARY = {
    "/lib/python3/selectors.py": "def select(grab):\n    return grab()\n",
    "/lib/python3/multiprocessing/connection.py": (
        "def wait(inner, grab):\n    return inner(grab)\n"
    ),
    "/lib/python3/multiprocessing/queues.py": (
        "def get(inner, *args):\n    return inner(*args)\n"
        "def put(inner, *args):\n    return inner(*args)\n"
    ),
    "/lib/python3/threading.py": "def __enter__(grab):\n    return grab()\n",
}
LIB: dict[str, object] = {}
for path, source in _LIBRARY.items():
    exec(compile(source, path, "exec"), LIB)  # noqa: S102 - test fixtures of our own


def grab():
    return sys._getframe(1)


def test_a_wait_inside_a_queues_get_is_where_a_death_is_raised():
    frame = LIB["get"](LIB["wait"], LIB["select"], grab)  # get -> wait -> select
    assert frame.f_code.co_name == "select"
    assert safe_to_raise(frame)


@pytest.mark.parametrize(
    "where",
    [
        # just after Condition.__enter__ took a queue's lock (its put): the hang this prevents
        lambda: LIB["put"](LIB["__enter__"], grab),
        lambda: LIB["wait"](LIB["select"], grab),  # a wait outside any queue's get
        lambda: LIB["get"](lambda g: g(), grab),  # inside get, not waiting (just took its lock)
        lambda: sys._getframe(),  # our own code
        lambda: None,
    ],
    ids=["lock-just-taken", "wait-outside-get", "get-not-waiting", "own-code", "no-frame"],
)
def test_anywhere_else_a_death_is_kept(where):
    assert not safe_to_raise(where())


class FakeTorch:
    """torch's handler: raises the death once (torch clears the iterator's pids), then nothing."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error

    def __call__(self, signum, frame):
        error, self.error = self.error, None
        if error is not None:
            raise error


def test_a_death_seen_at_an_unsafe_line_is_raised_at_the_next_wait_in_a_get():
    safe = LIB["get"](LIB["wait"], LIB["select"], grab)
    deaths = DeferredDeaths(
        FakeTorch(RuntimeError(DEATH)), 0, clock=lambda: 0.0, alive=lambda exc: True
    )
    deaths(17, sys._getframe())  # not raised here
    assert len(deaths.kept) == 1
    deaths(17, sys._getframe())  # offered again, still unsafe
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        deaths(17, safe)
    assert deaths.kept == [] and deaths.raised == 1
    deaths(17, safe)  # nothing left to raise


def test_a_kept_death_is_dropped_once_its_worker_is_reaped_or_after_a_while():
    safe = LIB["get"](LIB["wait"], LIB["select"], grab)
    reaped = DeferredDeaths(
        FakeTorch(RuntimeError(DEATH)), 0, clock=lambda: 0.0, alive=lambda exc: False
    )
    reaped(17, sys._getframe())
    reaped(17, safe)  # its iterator was shut down: nothing to raise into the next one
    assert reaped.kept == [] and reaped.raised == 0
    now = [0.0]
    old = DeferredDeaths(
        FakeTorch(RuntimeError(DEATH)), 0, clock=lambda: now[0], alive=lambda exc: True
    )
    old(17, sys._getframe())
    now[0] = GIVE_UP_S + 1
    old(17, safe)
    assert old.kept == [] and old.raised == 0


def test_errors_other_than_a_death_pass_through():
    deaths = DeferredDeaths(FakeTorch(RuntimeError("something else")), 0)
    with pytest.raises(RuntimeError, match="something else"):
        deaths(17, sys._getframe())
    assert deaths.kept == []


def test_the_resending_thread_sleeps_until_a_death_is_kept():
    deaths = DeferredDeaths(
        FakeTorch(RuntimeError(DEATH)), threading.get_ident(), alive=lambda exc: True
    )
    deaths.start()
    try:
        time.sleep(0.3)
        # Nothing kept: no timer runs, so nothing wakes it (a thread polling every RETRY_S would
        # have woken about 15 times by now, however loaded the machine).
        assert deaths.wakeups == 0
        deaths(17, sys._getframe())  # kept, not raised: the handler wakes the thread
        until = time.monotonic() + 30
        while deaths.wakeups < 3 and time.monotonic() < until:
            time.sleep(0.01)
        assert deaths.wakeups >= 3  # awake every RETRY_S while a death is kept
    finally:
        deaths.kept = []
        deaths.stop()
    assert deaths._resender is not None and not deaths._resender.is_alive()


def _exit_soon() -> None:
    time.sleep(0.3)
    raise SystemExit(3)


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGCHLD"), reason="POSIX signals")
def test_a_real_worker_death_waits_for_a_get_and_interrupts_it():
    torch = pytest.importorskip("torch")
    context = multiprocessing.get_context("fork")
    results: multiprocessing.Queue = context.Queue()
    lock = threading.Lock()
    key = id(results)
    with deferred_worker_deaths() as deaths:
        assert deaths is not None
        child = context.Process(target=_exit_soon)
        child.start()
        torch._C._set_worker_pids(key, (child.pid,))
        try:
            # Busy taking and releasing a lock while the worker dies: torch alone would raise in
            # here, at any line, a lock possibly held (NOTE [worker death]).
            until = time.monotonic() + 1.5
            while time.monotonic() < until:
                with lock:
                    pass
            assert not lock.locked()
            assert deaths.kept  # seen (reading its exit code would reap it, so it is not read)
            # The first wait for a batch gets the error, long before the get's own timeout.
            with pytest.raises(RuntimeError, match=r"exited unexpectedly with exit code 3"):
                results.get(timeout=60)
        finally:
            torch._C._remove_worker_pids(key)
            child.join()
    with pytest.raises(queue.Empty):  # the handler is torch's again, the death long gone
        results.get(timeout=0.05)


def test_a_broken_connection_with_workers_is_a_worker_death_unless_the_dataset_raised_it():
    from stallscope.config import LoaderConfig
    from stallscope.throughput.measure import _as_pipeline_error

    reset = ConnectionResetError(104, "Connection reset by peer")
    with_workers = LoaderConfig(num_workers=2, batch_size=32, prefetch_factor=2)
    # The worker died mid-handover and was not seen dead in time: still its death.
    text = str(_as_pipeline_error(reset, with_workers, 20.0, dead=[]))
    assert text.startswith("a DataLoader worker died unexpectedly with w=2 bs=32 pf=2")
    # The dataset's own network error, forwarded by torch with the worker's traceback.
    forwarded = ConnectionResetError(
        "Caught ConnectionResetError in DataLoader worker process 1.\nOriginal Traceback (most "
        'recent call last):\n  File "x.py", line 3, in get\nConnectionResetError: replica hung up'
    )
    text = str(_as_pipeline_error(forwarded, with_workers, 20.0, dead=[]))
    assert text.startswith("the dataset raised ConnectionResetError: replica hung up (worker 1)")
    # Without workers nothing was handed over: the error is the loader's own.
    in_process = LoaderConfig(num_workers=0, batch_size=32)
    assert "worker died" not in str(_as_pipeline_error(reset, in_process, 20.0, dead=[]))
