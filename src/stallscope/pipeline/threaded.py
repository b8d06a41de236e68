"""Thread-pooled fetching: a batch's items fetched by K threads (``worker_threads``, SPEC §8).

A latency-bound source (object store, network filesystem, database, remote
API) spends its fetch waiting, with the GIL released. More worker processes
overlap those waits, but each costs a whole Python process of memory and
start-up. Threads inside a few workers overlap them just as well.

NOTE [worker threads]
:class:`ThreadedDataset` wraps the user's map-style dataset. torch's fetcher
calls ``dataset.__getitems__(indices)`` when the dataset has one, then the
user's collate; the wrapper's ``__getitems__`` fetches the items with a
K-thread pool and returns them in the order of ``indices``. Everything else
(``__getitem__``, ``__len__``, any attribute) goes to the user's dataset, so
the user's sampler, batch_sampler and collate_fn work unchanged.

* **Where the pool lives.** Created lazily on the first batch in each process
  (a DataLoader worker, or the main process at ``num_workers=0``) and kept
  for that process's life. Pickling (spawn/forkserver) leaves it behind; a
  fork child notices the pid changed and starts its own: threads do not
  survive a fork.
* **No thread outlives it.** The pool is a ``ThreadPoolExecutor``: its
  threads exit when the wrapper is garbage-collected or :meth:`close` is
  called, and a worker process joins them at exit (multiprocessing runs
  ``threading._shutdown`` before the process ends), so a worker exits cleanly.
* **Errors name the index.** The exception of the first item (in index
  order) that raised propagates with its type intact and a note naming the
  index; torch's worker wrapper keeps the note in the traceback it forwards.
* **A dataset with its own ``__getitems__``** (a batched fetch: one query for
  the whole batch) keeps it: the wrapper delegates and adds no threads, since
  splitting a batched call would change what it does. torch's ``Subset`` and
  ``StackDataset`` only forward ``__getitems__``; they are looked through.
* **Thread safety** is the dataset's: :func:`check_thread_safety` fetches the
  same indices one at a time and from K threads at once and compares; the
  tuner only tries threads on a dataset that passes.
"""

from __future__ import annotations

import os
import random
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, StackDataset, Subset

_pool_lock = threading.Lock()


def _reset_lock_in_child() -> None:
    # A fork can happen while another thread holds the lock; the child gets a fresh one.
    global _pool_lock
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock_in_child)


def own_batched_fetch(dataset: Any) -> str | None:
    """The class whose own ``__getitems__`` fetches a batch in one call, or None.

    torch's ``Subset`` and ``StackDataset`` only forward ``__getitems__`` to
    the datasets they hold, so they count only when one of those has its own.
    """
    if isinstance(dataset, ThreadedDataset):
        return own_batched_fetch(dataset.dataset)
    if isinstance(dataset, Subset) and type(dataset).__getitems__ is Subset.__getitems__:
        return own_batched_fetch(dataset.dataset)
    if (
        isinstance(dataset, StackDataset)
        and type(dataset).__getitems__ is StackDataset.__getitems__
    ):
        inner = (
            dataset.datasets.values() if isinstance(dataset.datasets, dict) else dataset.datasets
        )
        found = [own_batched_fetch(d) for d in inner]
        return next((f for f in found if f), None)
    if getattr(type(dataset), "__getitems__", None) is not None:
        return type(dataset).__qualname__
    return None


class ThreadedDataset(Dataset[Any]):
    """A map-style dataset whose batches are fetched by ``threads`` threads (NOTE [worker
    threads])."""

    def __init__(self, dataset: Any, threads: int) -> None:
        if isinstance(dataset, IterableDataset):
            raise TypeError(
                "threaded_dataset needs a map-style dataset (indices); an IterableDataset has none"
            )
        if not hasattr(dataset, "__getitem__"):
            raise TypeError(
                f"threaded_dataset needs a dataset with __getitem__, not {type(dataset).__name__}"
            )
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, not {threads!r}")
        self.dataset = dataset
        self.threads = threads
        self.delegates_to = own_batched_fetch(dataset)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid: int | None = None

    # -- delegation ------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getattr__(self, name: str) -> Any:
        # Only called for names the wrapper lacks. Never for our own fields: during
        # unpickling they do not exist yet, and looking them up on the dataset would recurse.
        if name in ("dataset", "threads", "delegates_to", "_pool", "_pool_pid") or name.startswith(
            "__"
        ):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __repr__(self) -> str:
        return f"threaded_dataset({self.dataset!r}, threads={self.threads})"

    # -- pickling: the pool stays in the process that made it ---------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"] = None
        state["_pool_pid"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- the pool -------------------------------------------------------------------
    def _executor(self) -> ThreadPoolExecutor:
        pid = os.getpid()
        if self._pool is not None and self._pool_pid == pid:
            return self._pool
        with _pool_lock:
            if self._pool is None or self._pool_pid != pid:
                # After a fork the parent's pool object came along without its threads: drop it.
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="stallscope-fetch")
                self._pool_pid = pid
            return self._pool

    def close(self, wait: bool = True) -> None:
        """Stop this process's pool now (it also stops when the wrapper is garbage-collected)."""
        pool, self._pool = self._pool, None
        if pool is not None and self._pool_pid == os.getpid():
            pool.shutdown(wait=wait, cancel_futures=True)
        self._pool_pid = None

    # -- the batch ----------------------------------------------------------------------
    def __getitems__(self, indices: Sequence[Any]) -> list[Any]:
        if self.delegates_to is not None:
            items: list[Any] = self.dataset.__getitems__(indices)
            return items
        indices = list(indices)
        if len(indices) <= 1 or self.threads == 1:
            return [_fetch_one(self.dataset, i) for i in indices]
        pool = self._executor()
        futures = [pool.submit(_fetch_one, self.dataset, i) for i in indices]
        return _results_in_order(futures)


def _fetch_one(dataset: Any, index: Any) -> Any:
    try:
        return dataset[index]
    except BaseException as exc:
        _note_index(exc, index)
        raise


_NOTE = "while fetching dataset[{}] (stallscope.threaded_dataset)"
_NOTE_PATTERN = re.compile(r"while fetching dataset\[(.+?)\] \(stallscope\.threaded_dataset\)")


def noted_index(text: str) -> str | None:
    """The index named by a threaded fetch's note in an error text (torch's forwarded traceback), or
    None."""
    match = _NOTE_PATTERN.search(text)
    return match.group(1) if match else None


def without_notes(text: str) -> str:
    """``text`` less the lines of threaded fetch notes."""
    return "\n".join(line for line in text.splitlines() if not _NOTE_PATTERN.search(line))


def _note_index(exc: BaseException, index: Any) -> None:
    note = _NOTE.format(repr(index))
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:  # Python < 3.11: kept where our error messages look for it
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]


def _results_in_order(futures: list[Future[Any]]) -> list[Any]:
    out = []
    for n, future in enumerate(futures):
        try:
            out.append(future.result())
        except BaseException:
            for rest in futures[n + 1 :]:
                rest.cancel()  # items not started yet need not run; running ones finish in the pool
            raise
    return out


def threaded_dataset(dataset: Any, threads: int) -> ThreadedDataset:
    """``dataset`` with each batch's items fetched by a ``threads``-thread pool.

    Use it for latency-bound sources (storage, network, databases) where the
    fetch waits with the GIL released: K threads in each of a few workers
    overlap the waits like K times as many processes, at a fraction of their
    memory. Pass the result to ``DataLoader`` as usual; the sampler,
    batch_sampler and collate_fn are unchanged. The dataset must be
    thread-safe (``stallscope tune`` checks it before picking threads).
    Wrapping a wrapper replaces its thread count.
    """
    if isinstance(dataset, ThreadedDataset):
        dataset = dataset.dataset
    return ThreadedDataset(dataset, threads)


# -- the thread-safety check ------------------------------------------------------------------


@dataclass
class ThreadSafety:
    """What :func:`check_thread_safety` found."""

    safe: bool
    reason: str
    threads: int
    indices: list[int] = field(default_factory=list)
    mismatched: list[int] = field(default_factory=list)
    fields: int = 0  # leaves compared per item, summed over the checked items
    # leaves that differed between two one-at-a-time fetches: compared by structure
    random_fields: int = 0
    rounds: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 3)}


# Concurrent fetches switch threads this often during the check, so unsynchronised
# state shared between fetches (seek()+read() on one handle) interleaves as it would under load.
_CHECK_SWITCH_INTERVAL_S = 1e-5


def check_thread_safety(
    dataset: Any,
    *,
    threads: int = 8,
    indices: Sequence[int] | None = None,
    max_rounds: int = 64,
    max_seconds: float = 1.0,
    seed: int = 0,
) -> ThreadSafety:
    """Whether ``dataset`` gives the same items when ``threads`` threads fetch them at once.

    Fetches ``indices`` (default: ``max(8, threads)`` spread over the dataset)
    one at a time, then each twice from ``2 × threads`` threads at once (more
    fetches meeting in a race window), round after round in shuffled orders, until a difference is
    confirmed, ``max_seconds`` have passed (at least two rounds) or ``max_rounds``: a race is a
    matter of chance, so the check keeps rolling the dice while it can afford to.

    A field that comes back different is fetched once more, one at a time: if
    it differs then too, it is random (augmentation; threads share one global
    RNG, so it cannot be replayed per item) and is compared from then on by
    type, dtype and shape only; if it matches, it differed only under
    concurrency and the dataset is unsafe. An exception only under
    concurrency makes it unsafe too.
    """
    started = time.perf_counter()
    result = ThreadSafety(safe=False, reason="", threads=2 * threads)  # see the rounds below
    try:
        length = len(dataset)
    except TypeError:
        result.reason = (
            "the dataset has no length (an iterable stream), so it has no indices to fetch "
            "concurrently"
        )
        return result
    picks = list(indices) if indices is not None else _spread(length, max(8, threads))
    result.indices = picks
    if not picks:
        result.reason = "the dataset is empty"
        return result
    try:
        references = [_Reference(dataset[i]) for i in picks]
    except Exception as exc:
        result.reason = f"fetching one item at a time raised {type(exc).__name__}; fix that first"
        return result
    loose = _Loose()
    # Until a round has been timed: the sequential pass spread over the threads.
    per_round = (time.perf_counter() - started) / max(1, min(threads, len(picks)))
    previous = sys.getswitchinterval()
    sys.setswitchinterval(_CHECK_SWITCH_INTERVAL_S)
    rng = random.Random(seed)
    try:
        with ThreadPoolExecutor(result.threads, thread_name_prefix="stallscope-check") as pool:
            while result.rounds < max_rounds and not result.mismatched:
                if result.rounds >= 2 and time.perf_counter() - started + per_round > max_seconds:
                    break
                # Every index twice per round, from twice the threads: more fetches meet in the
                # window between one thread's seek() and its read().
                order = list(range(len(picks))) * 2
                rng.shuffle(order)
                round_start = time.perf_counter()
                futures = [(k, pool.submit(dataset.__getitem__, picks[k])) for k in order]
                result.rounds += 1
                suspects: list[tuple[int, Any]] = []
                for k, future in futures:
                    try:
                        where = references[k].differs(future.result(), loose)
                    except Exception as exc:
                        result.mismatched.append(picks[k])
                        result.reason = (
                            f"dataset[{picks[k]}] raised {type(exc).__name__} when "
                            f"{result.threads} threads fetched at once, "
                            "but not when fetched one at a time: the dataset is not thread-safe "
                            "(a shared file handle or client)"
                        )
                        break
                    if where is not None and all(k != s for s, _ in suspects):
                        suspects.append((k, where))
                per_round = time.perf_counter() - round_start
                # Outside the round (no other fetch running): random, or a difference only under
                # concurrency?
                for k, where in suspects:
                    if not result.mismatched and not references[k].confirm_random(
                        dataset[picks[k]], where, loose
                    ):
                        result.mismatched.append(picks[k])
                        result.reason = _unsafe_reason(picks[k], where, result.threads)
    finally:
        sys.setswitchinterval(previous)
    result.fields = sum(len(r.leaves) for r in references)
    result.random_fields = sum(
        1 for r in references for path in r.leaves if path in loose.values or path in loose.shapes
    )
    result.random_fields += sum(len(r.leaves) for r in references if r.loose)
    result.seconds = time.perf_counter() - started
    if result.mismatched:
        return result
    result.safe = True
    checked = (
        "every field"
        if not result.random_fields
        else "deterministic fields exactly, random ones by type and shape"
    )
    result.reason = (
        f"{len(picks)} items fetched twice each by {result.threads} threads at once "
        f"({result.rounds} round(s)) matched "
        f"one-at-a-time fetches ({checked})"
    )
    return result


def _unsafe_reason(index: int, where: str, threads: int) -> str:
    return (
        f"dataset[{index}]{where} came back different when {threads} threads fetched "
        "at once, but the same when "
        "fetched one at a time: the dataset shares state between fetches that is not thread-safe "
        "(e.g. one file handle read with seek()+read(), or a client that is not "
        "thread-safe); open such "
        "handles per thread (threading.local) to use worker threads"
    )


def _spread(length: int, count: int) -> list[int]:
    count = min(count, length)
    step = max(1, length // count)
    return sorted({(i * step) % length for i in range(count)})


@dataclass
class _Loose:
    """Field paths found random: ``values`` differ between fetches, ``shapes`` even in shape."""

    values: set[str] = field(default_factory=set)
    shapes: set[str] = field(default_factory=set)


class _Reference:
    """An item fetched one at a time, to compare concurrent fetches of the same index with."""

    def __init__(self, item: Any) -> None:
        self.leaves = dict(_leaves(item))
        self.top = _kind(item)
        # its structure varies between fetches: only the top-level kind is compared
        self.loose = False

    def differs(self, item: Any, loose: _Loose) -> str | None:
        """Where ``item`` departs from the reference (``[0]['x']``; ``""`` for the structure), or
        None."""
        if self.loose:
            return None if _kind(item) == self.top else ""
        got = dict(_leaves(item))
        if got.keys() != self.leaves.keys():
            return ""
        for path, value in got.items():
            ref = self.leaves[path]
            if path in loose.shapes:
                same = _kind(value)[:2] == _kind(ref)[:2]
            elif path in loose.values:
                same = _kind(value) == _kind(ref)
            else:
                same = _equal(value, ref)
            if not same:
                return path
        return None

    def confirm_random(self, again: Any, where: str, loose: _Loose) -> bool:
        """Whether a one-at-a-time fetch differs at ``where`` too (random: noted in ``loose``)."""
        got = dict(_leaves(again))
        if where == "" or where not in got:
            if got.keys() == self.leaves.keys() and _kind(again) == self.top:
                return False
            self.loose = True
            return True
        if _kind(got[where]) != _kind(self.leaves[where]):
            loose.shapes.add(where)
            return True
        if not _equal(got[where], self.leaves[where]):
            loose.values.add(where)
            return True
        return False


_MAX_FLATTEN = 256


def _leaves(item: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(item, dict):
        for key in sorted(item, key=str):
            yield from _leaves(item[key], f"{path}[{key!r}]")
    elif isinstance(item, (list, tuple)) and len(item) <= _MAX_FLATTEN:
        for n, value in enumerate(item):
            yield from _leaves(value, f"{path}[{n}]")
    else:
        yield path, item


def _kind(value: Any) -> tuple[Any, ...]:
    if isinstance(value, torch.Tensor):
        return ("Tensor", str(value.dtype), tuple(value.shape))
    if isinstance(value, np.ndarray):
        return ("ndarray", str(value.dtype), value.shape)
    if isinstance(value, dict):
        return ("dict", tuple(sorted(map(str, value))))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, len(value))
    size = getattr(value, "size", None)
    mode = getattr(value, "mode", None)
    if mode is not None and hasattr(value, "tobytes"):  # a PIL image, duck-typed
        return (type(value).__name__, mode, size)
    return (type(value).__name__,)


def equal_arrays(a: Any, b: Any) -> bool | None:
    """Whether two tensors (or two NumPy arrays) hold the same dtype, shape and values; None when
    neither is one."""
    kinds: tuple[tuple[type[Any], Callable[[Any, Any], Any]], ...] = (
        (torch.Tensor, torch.equal),
        (np.ndarray, np.array_equal),
    )
    for kind, same in kinds:
        if isinstance(a, kind) or isinstance(b, kind):
            return (
                isinstance(a, kind)
                and isinstance(b, kind)
                and a.dtype == b.dtype
                and a.shape == b.shape
                and bool(same(a, b))
            )
    return None


def _equal(a: Any, b: Any) -> bool:
    try:
        arrays = equal_arrays(a, b)
        if arrays is not None:
            return arrays
        if getattr(a, "mode", None) is not None and hasattr(a, "tobytes"):
            return _kind(a) == _kind(b) and a.tobytes() == b.tobytes()
        return bool(a == b)
    except Exception:  # an object without a meaningful ==: not comparable by value
        return False
