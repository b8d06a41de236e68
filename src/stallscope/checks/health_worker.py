"""The probe worker of the sample-health probe: a process that behaves like a DataLoader worker.

It runs the protocol of ``messages.py`` with ``health.py`` (the main-process side): it
sets itself up as torch's ``_worker_loop`` would (one intra-op thread,
per-worker seeds, ``get_worker_info()``, the user's ``worker_init_fn``), then
fetches the indices it is sent, timing each one, and reports exceptions with
the frame that raised them. ``faulthandler`` writes its Python stack to a file
on SIGUSR1 (hangs) and on fatal signals (native crashes).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import describe_exception
from . import messages as msg
from .stacks import THIS_PACKAGE, frame_label

STACK_SIGNAL = getattr(signal, "SIGUSR1", None)


def _where_raised(exc: BaseException) -> str | None:
    """The innermost traceback frame outside this probe: ``file:line in function``."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith(THIS_PACKAGE)
    ]
    if not frames:
        return None
    last = frames[-1]
    return frame_label(last.filename, last.lineno, last.name)


def _watch_parent(parent_pid: int) -> None:
    """Exit when the parent is gone (we get re-parented), even while the main thread is stuck in a
    fetch.

    The parent is the process that started us: the main process under fork and
    spawn, the fork server under forkserver (which exits with the main process).
    """
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(0)


def _become_dataloader_worker(
    worker_id: int, num_workers: int, dataset: Any, base_seed: int, init_fn: Any
) -> None:
    """Set this process up the way torch's ``_worker_loop`` sets up a DataLoader worker."""
    import random

    import numpy as np
    import torch

    torch.set_num_threads(1)
    seed = base_seed + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(
        np.random.SeedSequence([worker_id, base_seed & 0xFFFFFFFF, base_seed >> 32]).generate_state(
            4
        )
    )
    with contextlib.suppress(Exception):  # private in torch; get_worker_info() reads it
        from torch.utils.data._utils import worker as torch_worker

        torch_worker._worker_info = torch_worker.WorkerInfo(
            id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset
        )
    if init_fn is not None:
        init_fn(worker_id)


def _structure_groups(items: list[Any], indices: list[Any]) -> list[list[Any]]:
    from ..pipeline.structure import describe_structure

    groups: dict[str, list[Any]] = {}
    for index, item in zip(indices, items):
        groups.setdefault(describe_structure(item), []).append(index)
    return [[kind, idx[:8]] for kind, idx in groups.items()]


def _collate(
    conn: Any,
    collate: Callable[[list[Any]], Any],
    items: list[Any],
    indices: list[Any],
    report_structure: bool,
    *,
    source: Any = None,
) -> None:
    """Collate what a DataLoader would hand the collate: ``items``, or where ``source`` is a
    dataset with its own ``__getitems__``, what that returns for ``indices`` (each index was
    fetched alone: a failure of the whole batch is the collate step's)."""
    from ..pipeline.structure import describe_structure, fetch_for_collate, nbytes

    try:
        given = fetch_for_collate(source, indices) if source is not None else items
        start = time.perf_counter()
        batch = collate(given)
    except Exception as exc:
        conn.send(
            msg.CollateFailed(
                indices,
                describe_exception(exc, 300),
                _where_raised(exc),
                _structure_groups(items, indices),
            )
        )
        return
    seconds = time.perf_counter() - start
    conn.send(
        msg.Collated(
            indices, seconds, nbytes(batch), describe_structure(batch) if report_structure else None
        )
    )


def _fetch_indices(
    conn: Any,
    dataset: Any,
    collate: Callable[[list[Any]], Any],
    indices: list[int],
    do_collate: bool,
    first: bool,
) -> None:
    from ..pipeline.threaded import own_batched_fetch

    # A dataset with its own __getitems__ is fetched as torch fetches it, never by __getitem__:
    # each index as a batch of one here, and the batch to collate in one call (what it returns
    # is what its collate expects, not necessarily a list).
    batched = bool(own_batched_fetch(dataset))
    fetch = (lambda i: dataset.__getitems__([i])) if batched else dataset.__getitem__
    items: list[Any] = []
    fetched: list[int] = []
    for index in indices:
        conn.send(msg.Started(index))
        start = time.perf_counter()
        try:
            item = fetch(index)
        except Exception as exc:
            seconds = time.perf_counter() - start
            conn.send(
                msg.FetchFailed(
                    index,
                    seconds,
                    type(exc).__name__,
                    describe_exception(exc, 300),
                    _where_raised(exc),
                )
            )
            continue
        conn.send(msg.Fetched(index, time.perf_counter() - start))
        if do_collate:
            items.append(item)
            fetched.append(index)
    if do_collate and items:
        _collate(conn, collate, items, fetched, first, source=dataset if batched else None)


def health_worker(
    worker_id: int,
    num_workers: int,
    dataset: Any,
    collate: Callable[[list[Any]], Any],
    init_fn: Any,
    base_seed: int,
    conn: Any,
    stack_path: str,
) -> None:
    """Entry point of one probe worker (module level, so spawn can import it)."""
    # Ctrl-C in a terminal reaches the whole process group; the main process decides
    # when workers stop (and kills them), as it does for DataLoader workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stack_file = open(stack_path, "w")  # noqa: SIM115 - stays open for faulthandler
    stack_file.write(f"MAIN 0x{threading.main_thread().ident or 0:016x}\n")
    stack_file.flush()
    if STACK_SIGNAL is not None:
        faulthandler.register(STACK_SIGNAL, file=stack_file, all_threads=True)
    # A segfault or abort in native code (a decoder on a corrupt file) leaves its Python stack there
    # too.
    faulthandler.enable(file=stack_file, all_threads=True)
    threading.Thread(
        target=_watch_parent, args=(os.getppid(),), name="stallscope-parent-watch", daemon=True
    ).start()
    try:
        _become_dataloader_worker(worker_id, num_workers, dataset, base_seed, init_fn)
    except Exception as exc:
        conn.send(msg.InitFailed(describe_exception(exc, 300), _where_raised(exc)))
        return
    conn.send(msg.Ready())
    iterator = None
    position = 0
    first = True
    while True:
        if not conn.poll(1.0):
            continue
        try:
            message = conn.recv()
        except EOFError:
            return
        if isinstance(message, msg.Stop):
            return
        if isinstance(message, msg.AskThreads):
            from .threads import thread_report

            conn.send(msg.ThreadReport(thread_report(dataset, collate)))
        elif isinstance(message, msg.Fetch):
            _fetch_indices(conn, dataset, collate, message.indices, message.collate, first)
            first = False
            conn.send(msg.Done())
        elif isinstance(message, msg.Next):
            if iterator is None:
                iterator = iter(dataset)
            items: list[Any] = []
            labels: list[Any] = []
            exhausted = False
            for _ in range(message.count):
                conn.send(msg.Started(position))
                start = time.perf_counter()
                try:
                    item = next(iterator)
                except StopIteration:
                    exhausted = True
                    break
                except Exception as exc:
                    conn.send(
                        msg.FetchFailed(
                            position,
                            time.perf_counter() - start,
                            type(exc).__name__,
                            describe_exception(exc, 300),
                            _where_raised(exc),
                        )
                    )
                    exhausted = True  # a generator that raised is finished
                    break
                conn.send(msg.Fetched(position, time.perf_counter() - start))
                items.append(item)
                labels.append(position)
                position += 1
            if message.collate and items:
                _collate(conn, collate, items, labels, first)
                first = False
            if exhausted:
                conn.send(msg.Exhausted())
            conn.send(msg.Done())
