"""The messages of the sample-health probe's pipe (``health.py`` <-> ``health_worker.py``).

One small frozen dataclass per kind of message, as torch's worker loop does
(``_ResumeIteration``, ``_IterableDatasetStopIteration``): each side
dispatches on the type, never on a string tag or a tuple position, and a
field added to one message cannot shift the others; the kinds that carry
nothing (``Ready()``, ``Stop()``, ...) share the base :class:`Signal`. They are
defined at module level and hold only plain values (ints, floats, strings,
lists, dicts), so they pickle under every start method.

    main -> worker   Fetch(indices, collate)   Next(count, collate)   AskThreads()   Stop()
    worker -> main   Ready()  Started(index)  Fetched(index, seconds)
                     FetchFailed(index, seconds, error_type, message, where)
                     Collated(indices, seconds, nbytes, structure)
                     CollateFailed(indices, error, where, item_structures)
                     Exhausted()  Done()  ThreadReport(report)  InitFailed(message, where)

``index`` is a dataset index (map-style) or the position of the item in the
worker's own stream (iterable datasets).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union


@dataclass(frozen=True)
class Signal:
    """A message that carries nothing but its kind (the subclasses below)."""


# -- main process -> probe worker -----------------------------------------------------------


@dataclass(frozen=True)
class Fetch:
    """Fetch these indices of a map-style dataset, then collate them when ``collate``."""

    indices: list[int]
    collate: bool


@dataclass(frozen=True)
class Next:
    """Take the next ``count`` items of an iterable dataset, then collate them when ``collate``."""

    count: int
    collate: bool


class AskThreads(Signal):
    """Report the threads the dataset and collate start (``threads.thread_report``)."""


class Stop(Signal):
    """Exit now (the worker is idle)."""


# -- probe worker -> main process -----------------------------------------------------------


class Ready(Signal):
    """The worker set itself up as a DataLoader worker and waits for work."""


@dataclass(frozen=True)
class Started:
    """The fetch of ``index`` starts now (the main process times the hang timeout from here)."""

    index: Any


@dataclass(frozen=True)
class Fetched:
    """``index`` was fetched in ``seconds``."""

    index: Any
    seconds: float


@dataclass(frozen=True)
class FetchFailed:
    """Fetching ``index`` raised after ``seconds``; ``where`` is the frame that raised (``file:line
    in function``)."""

    index: Any
    seconds: float
    error_type: str
    message: str
    where: str | None


@dataclass(frozen=True)
class Collated:
    """The items of ``indices`` were collated in ``seconds`` into a batch of ``nbytes`` (its
    ``structure`` on request)."""

    indices: list[Any]
    seconds: float
    nbytes: int
    structure: str | None


@dataclass(frozen=True)
class CollateFailed:
    """Collating the items of ``indices`` raised; ``item_structures`` groups them by shape:
    ``[[kind, [indices]], ...]``."""

    indices: list[Any]
    error: str
    where: str | None
    item_structures: list[list[Any]]


class Exhausted(Signal):
    """The worker's stream (iterable dataset) ended."""


class Done(Signal):
    """The work sent last is finished: the worker is idle."""


@dataclass(frozen=True)
class ThreadReport:
    """The answer to :class:`AskThreads`."""

    report: dict[str, Any]


@dataclass(frozen=True)
class InitFailed:
    """Setting the worker up (the user's ``worker_init_fn``) raised."""

    message: str
    where: str | None


Request = Union[Fetch, Next, AskThreads, Stop]
Reply = Union[
    Ready,
    Started,
    Fetched,
    FetchFailed,
    Collated,
    CollateFailed,
    Exhausted,
    Done,
    ThreadReport,
    InitFailed,
]
