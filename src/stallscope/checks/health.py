"""Probe: per-sample fetch times, exceptions, hangs and collate failures, in worker processes.

Why not a DataLoader here: when a DataLoader worker hangs, all the main process
learns is "timed out"; it cannot say which index, where the worker was stuck,
or go on with the rest. So this probe runs its own small pool of worker
processes that behave like DataLoader workers (same start method, one intra-op
thread, per-worker seeds, ``get_worker_info()`` and the user's
``worker_init_fn``) and talk to the main process over a pipe, in the typed
messages of ``messages.py`` (one frozen dataclass per kind).

The main process times each index from the worker's ``Started`` message. Past the
per-sample timeout it sends SIGUSR1, on which ``faulthandler`` in the worker
writes every thread's Python stack to a file, then kills the worker, records
the index and the innermost frame it was stuck on, starts a fresh worker and
carries on with the remaining indices. Every wait is bounded by the probe's
deadline, and the pool is torn down in ``finally`` (NOTE [worker shutdown] in
``runtime/processes.py``); each worker also exits by itself if the main process dies.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from .health_worker import STACK_SIGNAL, health_worker
from .messages import (
    AskThreads,
    Collated,
    CollateFailed,
    Done,
    Exhausted,
    Fetch,
    Fetched,
    FetchFailed,
    InitFailed,
    Next,
    Ready,
    Reply,
    Started,
    Stop,
    ThreadReport,
)
from .stacks import frame_label, parse_stack, stuck_frame

_MAX_ERRORS_KEPT = 50
_SLOWEST_KEPT = 20
# A sample still in flight when the budget runs out is reported (with its stack) when it
# has been running this long, and this many times the median fetch.
UNFINISHED_MIN_S = 1.0
UNFINISHED_MEDIANS = 10.0

Plan = Callable[[set[Any], float, float], list[int]]


# -- in the main process ---------------------------------------------------------------------------


@dataclass
class WorkerSlot:
    """One probe worker as the main process sees it."""

    worker_id: int
    process: Any
    conn: Any
    stack_path: Path
    started_at: float
    ready: bool = False
    busy: bool = False
    pending: list[Any] = field(default_factory=list)  # indices sent, not yet answered
    current: Any = None
    current_since: float = 0.0
    exhausted: bool = False


@dataclass
class HealthSettings:
    timeout: float
    deadline: float  # time.monotonic() by which the probe stops
    workers: int
    start_method: str
    batch_size: int
    seed: int = 0
    max_hangs: int = 3
    startup_timeout: float = 60.0
    sample_limit: int | None = None  # iterable datasets: stop after this many items


def timing_summary(values: list[float]) -> dict[str, Any]:
    """Median, MAD and tail quantiles of sorted fetch times (seconds)."""
    if not values:
        return {"count": 0}
    n = len(values)

    def quantile(q: float) -> float:
        return values[min(n - 1, int(q * (n - 1) + 0.5))]

    median = quantile(0.5)
    mad = sorted(abs(v - median) for v in values)[n // 2]
    return {
        "count": n,
        "median_s": round(median, 6),
        "mad_s": round(mad, 6),
        "p90_s": round(quantile(0.9), 6),
        "p99_s": round(quantile(0.99), 6),
        "max_s": round(values[-1], 6),
        "total_s": round(sum(values), 4),
    }


def callable_name(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or ""
    return f"{module}.{name}" if module and module != "builtins" else name


class HealthProbe:
    def __init__(
        self,
        pipeline: Any,
        settings: HealthSettings,
        workdir: Path,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.s = settings
        self.workdir = workdir
        self.progress = progress
        self.ctx = multiprocessing.get_context(settings.start_method)
        import torch

        self.base_seed = int(
            torch.empty((), dtype=torch.int64)
            .random_(generator=torch.Generator().manual_seed(settings.seed))
            .item()
        )
        self.slots: list[WorkerSlot] = []
        self.times: dict[Any, float] = {}
        self.retimes: dict[Any, float] = {}
        self.errors: list[dict[str, Any]] = []
        self.error_count = 0
        self.hangs: list[dict[str, Any]] = []
        self.unfinished: list[dict[str, Any]] = []
        self.crashes: list[dict[str, Any]] = []
        self.collated = 0
        self.collate_errors: list[dict[str, Any]] = []
        self.collate_error_count = 0
        self.batch_bytes: list[int] = []
        self.batch_structure: str | None = None
        self.init_error: dict[str, Any] | None = None
        self.threads: dict[str, Any] | None = None
        self.stopped: str | None = None
        self.restarts = 0
        self._retiming = False
        self._spawned = 0
        self._first_start: float | None = None  # the first fetch, after the workers started
        self.checked: set[Any] = set()  # every index fetched, whatever the outcome

    # -- worker lifecycle --------------------------------------------------------------------
    def _start(self, worker_id: int) -> WorkerSlot:
        parent, child = self.ctx.Pipe(duplex=True)
        self._spawned += 1
        stack_path = self.workdir / f"stack-{worker_id}-{self._spawned}.txt"
        # typeshed's BaseContext (what get_context(str) returns) lacks Process; every concrete
        # start-method context has it.
        process = self.ctx.Process(  # type: ignore[attr-defined]
            target=health_worker,
            args=(
                worker_id,
                self.s.workers,
                self.pipeline.dataset,
                self.pipeline.collate,
                self.pipeline.worker_init_fn,
                self.base_seed,
                child,
                str(stack_path),
            ),
            daemon=True,
            name=f"stallscope-check-{worker_id}",
        )
        process.start()
        child.close()
        return WorkerSlot(worker_id, process, parent, stack_path, time.monotonic())

    def _stop(self, slot: WorkerSlot, *, kill: bool = False) -> None:
        if not kill and not slot.busy and slot.process.is_alive():
            with contextlib.suppress(Exception):
                slot.conn.send(Stop())
            slot.process.join(1.0)
        if slot.process.is_alive():
            slot.process.kill()
            slot.process.join(2.0)
        with contextlib.suppress(Exception):
            slot.conn.close()

    def _replace(self, slot: WorkerSlot) -> WorkerSlot:
        self._stop(slot, kill=True)
        self.restarts += 1
        fresh = self._start(slot.worker_id)
        self.slots[self.slots.index(slot)] = fresh
        return fresh

    def close(self) -> None:
        for slot in self.slots:
            self._stop(slot)
        self.slots = []

    # -- message handling ------------------------------------------------------------------
    def _handle(self, slot: WorkerSlot, message: Reply) -> None:
        if isinstance(message, Ready):
            slot.ready = True
        elif isinstance(message, Started):
            slot.current = message.index
            slot.current_since = time.monotonic()
            if self._first_start is None and not self._retiming:
                self._first_start = slot.current_since
        elif isinstance(message, (Fetched, FetchFailed)):
            index = self._label(slot, message.index)
            self.checked.add(index)
            slot.current = None
            with contextlib.suppress(ValueError):
                slot.pending.remove(message.index)
            if isinstance(message, Fetched):
                (self.retimes if self._retiming else self.times)[index] = float(message.seconds)
            else:
                self.error_count += 1
                if len(self.errors) < _MAX_ERRORS_KEPT:
                    self.errors.append(
                        {
                            "index": index,
                            "type": message.error_type,
                            "message": message.message,
                            "where": message.where,
                            "seconds": round(message.seconds, 4),
                        }
                    )
            if self.progress is not None and not self._retiming:
                self.progress(len(self.times) + self.error_count)
        elif isinstance(message, Collated):
            self.collated += 1
            self.batch_bytes.append(int(message.nbytes))
            if message.structure is not None and self.batch_structure is None:
                self.batch_structure = message.structure
        elif isinstance(message, CollateFailed):
            self.collated += 1
            self.collate_error_count += 1
            if len(self.collate_errors) < 10:
                self.collate_errors.append(
                    {
                        "indices": [self._label(slot, i) for i in message.indices][:16],
                        "error": message.error,
                        "where": message.where,
                        "item_structures": [
                            {"structure": kind, "indices": [self._label(slot, i) for i in idx]}
                            for kind, idx in message.item_structures
                        ],
                    }
                )
        elif isinstance(message, Exhausted):
            slot.exhausted = True
        elif isinstance(message, Done):
            slot.busy = False
            slot.pending = []
            slot.current = None
        elif isinstance(message, ThreadReport):
            self.threads = message.report
        elif isinstance(message, InitFailed):
            self.init_error = {
                "message": message.message,
                "where": message.where,
                "worker": slot.worker_id,
            }

    def _label(self, slot: WorkerSlot, index: Any) -> Any:
        return f"w{slot.worker_id}#{index}" if self.pipeline.is_iterable else index

    def _drain(self, slot: WorkerSlot) -> bool:
        """Handle every message waiting on ``slot``; False when its pipe is closed."""
        try:
            while slot.conn.poll():
                self._handle(slot, slot.conn.recv())
        except (EOFError, OSError):
            return False
        return True

    # -- failure handling ----------------------------------------------------------------------
    def _dump_stack(self, slot: WorkerSlot) -> list[dict[str, Any]]:
        if STACK_SIGNAL is None:
            return []
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(slot.process.pid, STACK_SIGNAL)
        text = previous = ""
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            time.sleep(0.05)
            with contextlib.suppress(OSError):
                text = slot.stack_path.read_text(errors="replace")
            if "most recent call first" in text and text == previous:
                break  # the dump is complete once the file stops changing
            previous = text
        return parse_stack(text)

    def _on_hang(self, slot: WorkerSlot, now: float) -> WorkerSlot | None:
        frames = self._dump_stack(slot)
        where = stuck_frame(frames)
        index = self._label(slot, slot.current)
        self.hangs.append(
            {
                "index": index,
                "worker": slot.worker_id,
                "pid": slot.process.pid,
                "waited_s": round(now - slot.current_since, 2),
                "where": frame_label(where["file"], where["line"], where["function"])
                if where
                else None,
                "stack": [frame_label(f["file"], f["line"], f["function"]) for f in frames[:12]],
            }
        )
        return self._requeue_after(slot, skip=slot.current)

    def _note_unfinished(self, now: float) -> None:
        """Samples still being fetched, suspiciously long, when the budget ran out: where are
        they?"""
        values = sorted(self.times.values())
        median = values[len(values) // 2] if values else 0.0
        for slot in self.slots:
            running = now - slot.current_since
            if (
                slot.current is None
                or not slot.busy
                or running < max(UNFINISHED_MIN_S, UNFINISHED_MEDIANS * median)
            ):
                continue
            frames = self._dump_stack(slot)
            where = stuck_frame(frames)
            self.unfinished.append(
                {
                    "index": self._label(slot, slot.current),
                    "running_s": round(running, 2),
                    "where": frame_label(where["file"], where["line"], where["function"])
                    if where
                    else None,
                    "stack": [
                        frame_label(f["file"], f["line"], f["function"]) for f in frames[:12]
                    ],
                }
            )

    def _on_crash(self, slot: WorkerSlot) -> WorkerSlot | None:
        slot.process.join(1.0)
        code = slot.process.exitcode
        name = None
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                name = signal.Signals(-code).name
        where = None
        if not slot.ready:
            # It died before fetching anything (e.g. a spawned worker could not import or
            # unpickle the dataset): every replacement would do the same.
            how = f"killed by {name}" if name else f"exit code {code}"
            self.init_error = {
                "message": f"a probe worker died during start-up ({how})",
                "where": None,
                "worker": slot.worker_id,
            }
            self._stop(slot, kill=True)
            return None
        self.crashes.append(
            {
                "index": self._label(slot, slot.current) if slot.current is not None else None,
                "worker": slot.worker_id,
                "exitcode": code,
                "signal": name,
            }
        )
        if slot.current is not None:
            self.error_count += 1
            if len(self.errors) < _MAX_ERRORS_KEPT:
                how = f"killed by {name}" if name else f"exit code {code}"
                with contextlib.suppress(OSError):
                    frame = stuck_frame(parse_stack(slot.stack_path.read_text(errors="replace")))
                    where = (
                        frame_label(frame["file"], frame["line"], frame["function"])
                        if frame
                        else None
                    )
                self.errors.append(
                    {
                        "index": self._label(slot, slot.current),
                        "type": "WorkerCrash",
                        "message": f"the worker process died while fetching it ({how})",
                        "where": where,
                        "seconds": None,
                    }
                )
        return self._requeue_after(slot, skip=slot.current)

    def _requeue_after(self, slot: WorkerSlot, *, skip: Any) -> WorkerSlot | None:
        if self.pipeline.is_iterable:
            # A fresh worker would restart this shard from its first item and meet the
            # same sample again: retire the worker instead.
            self._stop(slot, kill=True)
            self.slots.remove(slot)
            return None
        rest = [i for i in slot.pending if i != skip]
        if rest:
            self._queue.appendleft(rest)
        return self._replace(slot)

    # -- the loop ------------------------------------------------------------------------------
    def _assign(self, slot: WorkerSlot, work: Any) -> None:
        slot.busy = True
        slot.current = None
        if self.pipeline.is_iterable:
            slot.pending = []
            slot.conn.send(Next(work, not self._retiming))
        else:
            slot.pending = list(work)
            slot.conn.send(Fetch(list(work), not self._retiming))

    def _next_work(self, slot: WorkerSlot) -> Any:
        if self.pipeline.is_iterable:
            if slot.exhausted:
                return None
            limit = self.s.sample_limit
            done = len(self.times) + self.error_count
            if limit is not None and done >= limit:
                return None
            return self.s.batch_size
        return self._queue.popleft() if self._queue else None

    def _work_left(self) -> bool:
        if not self.slots:
            return False
        if not self.pipeline.is_iterable:
            return bool(self._queue)
        limit = self.s.sample_limit
        if limit is not None and len(self.times) + self.error_count >= limit:
            return False
        return any(not s.exhausted for s in self.slots)

    def _run(self, work: list[list[Any]] | None) -> None:
        """Drive the pool until the work is done, the deadline passes or too many hangs."""
        self._queue: deque[list[Any]] = deque(work or [])
        while True:
            now = time.monotonic()
            if now >= self.s.deadline:
                self.stopped = self.stopped or "budget"
                self._note_unfinished(now)
                return
            if len(self.hangs) >= self.s.max_hangs:
                self.stopped = "hangs"
                return
            if self.init_error is not None:
                self.stopped = "worker_init_fn failed"
                return
            for slot in list(self.slots):
                if slot.ready and not slot.busy:
                    job = self._next_work(slot)
                    if job is not None:
                        self._assign(slot, job)
            if not any(s.busy for s in self.slots) and not self._work_left():
                return
            wait(
                [s.conn for s in self.slots] + [s.process.sentinel for s in self.slots],
                timeout=min(0.1, max(0.0, self.s.deadline - now)),
            )
            for slot in list(self.slots):
                alive = self._drain(slot)
                now = time.monotonic()
                if not alive or not slot.process.is_alive():
                    self._drain(slot)
                    if self.init_error is not None:
                        self._stop(slot, kill=True)
                        return
                    if slot.busy or not slot.ready:
                        self._on_crash(slot)
                        if self.init_error is not None:
                            return
                    else:
                        self._replace(
                            slot
                        )  # died while idle (e.g. the OOM killer): start a fresh one
                    continue
                if slot.current is not None and now - slot.current_since > self.s.timeout:
                    self._on_hang(slot, now)
                elif not slot.ready and now - slot.started_at > self.s.startup_timeout:
                    slot.current = "<worker start-up>"
                    slot.current_since = slot.started_at
                    self._on_hang(slot, now)
                    self.stopped = "worker start-up hung"
                    return

    def run(
        self,
        order: list[int] | None,
        retime: Callable[[dict[Any, float]], list[Any]] | None,
        plan: Plan | None = None,
    ) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            self.slots = [self._start(k) for k in range(self.s.workers)]
            bs = self.s.batch_size

            def batches(indices: list[int] | None) -> list[list[int]] | None:
                return (
                    None
                    if indices is None
                    else [indices[i : i + bs] for i in range(0, len(indices), bs)]
                )

            self._run(batches(order))
            if (
                plan is not None
                and order is not None
                and self.stopped is None
                and self._first_start is not None
            ):
                # The first indices measured the pool's pace: plan the rest of the budget with it.
                now = time.monotonic()
                rate = len(self.checked) / max(1e-3, now - self._first_start)
                # Hung or crashed indices were tried too: never planned again.
                extra = plan(set(self.checked) | set(order), rate, self.s.deadline - now)
                if extra:
                    order = order + extra
                    self._run(batches(extra))
            candidates = (
                retime(self.times) if retime is not None and not self.pipeline.is_iterable else []
            )
            if candidates and time.monotonic() < self.s.deadline and self.stopped is None:
                self._retiming = True
                per = max(1, -(-len(candidates) // max(1, len(self.slots))))
                self._run([candidates[i : i + per] for i in range(0, len(candidates), per)])
                self._retiming = False
            self._ask_threads()
        finally:
            self.close()
        return self._record(order, time.perf_counter() - started)

    def _ask_threads(self) -> None:
        slot = next(
            (s for s in self.slots if s.ready and not s.busy and s.process.is_alive()), None
        )
        if slot is None:
            return
        with contextlib.suppress(Exception):
            slot.conn.send(AskThreads())
            until = min(self.s.deadline + 2.0, time.monotonic() + 5.0)
            while self.threads is None and time.monotonic() < until:
                if slot.conn.poll(0.1):
                    self._handle(slot, slot.conn.recv())

    def _record(self, order: list[int] | None, seconds: float) -> dict[str, Any]:
        values = sorted(self.times.values())
        slowest = sorted(self.times.items(), key=lambda kv: kv[1], reverse=True)[:_SLOWEST_KEPT]
        return {
            "kind": "iterable" if self.pipeline.is_iterable else "map",
            "requested": None if order is None else len(order),
            "fetched": len(self.times),
            "errors_total": self.error_count,
            "timing": timing_summary(values),
            "slowest": [[k, round(v, 5)] for k, v in slowest],
            "retimed": [[k, round(v, 5)] for k, v in self.retimes.items()],
            "errors": self.errors,
            "hangs": self.hangs,
            "unfinished": self.unfinished,
            "crashes": self.crashes,
            "collate": {
                "batches": self.collated,
                "errors_total": self.collate_error_count,
                "errors": self.collate_errors,
                "max_batch_bytes": max(self.batch_bytes) if self.batch_bytes else None,
                "batch_structure": self.batch_structure,
                "collate_fn": callable_name(self.pipeline.collate),
            },
            "init_error": self.init_error,
            "threads": self.threads,
            "stopped": self.stopped,
            "restarts": self.restarts,
            "seconds": round(seconds, 3),
            "timeout_s": self.s.timeout,
        }


def probe_health(
    pipeline: Any,
    settings: HealthSettings,
    *,
    order: list[int] | None,
    workdir: Path,
    retime: Callable[[dict[Any, float]], list[Any]] | None = None,
    plan: Plan | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, Any], set[Any]]:
    """Fetch ``order`` (map-style) or iterate (iterable) in probe workers; see the module docstring.

    ``plan(checked, items_per_s, seconds_left)``, once ``order`` is done,
    returns more indices to fetch. Returns the record and every index fetched.
    """
    probe = HealthProbe(pipeline, settings, workdir, progress)
    return probe.run(order, retime, plan), probe.checked
