"""Timing pieces of :mod:`.watch` that stand on their own: the step-boundary synchronise and the
timed iterator.

:func:`resolve_sync` picks what ``sync=`` calls at every step boundary;
:class:`TimedIterator` is what the framework integrations hand to a framework
so that each ``next()`` is one timed data wait of a watch. Both are imported
from ``stallscope.training.watch`` as well.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, Union

from ..errors import UsageError


class WaitRecorder(Protocol):
    """What a :class:`TimedIterator` tells its watch (the manual API of :class:`~.watch.Watch`)."""

    def data_start(self) -> None: ...

    def data_end(self) -> None: ...

    def cancel_wait(self) -> None: ...

    def observe(self, iterator: Any) -> None: ...


# A runtime alias: typing.Union, not ``|``, so that Python 3.9 can evaluate it.
SyncSpec = Union[None, str, bool, Callable[[], Any]]


def resolve_sync(sync: SyncSpec) -> tuple[Callable[[], Any] | None, str | None]:
    """The function to call at each step boundary, and its name for the record.

    ``None``/``False``: no synchronise. ``"cuda"``/``True``: ``torch.cuda.synchronize``
    (a usage error when no CUDA device is visible). A callable: called as is
    (e.g. ``torch.cuda.current_stream().synchronize`` or another backend's).
    """
    if sync is None or sync is False:
        return None, None
    if callable(sync):
        return sync, getattr(sync, "__qualname__", None) or type(sync).__name__
    if sync is True or sync == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError(
                "sync='cuda' needs a CUDA device, and this process sees none; leave sync=None on "
                "CPU."
            )
        return torch.cuda.synchronize, "cuda"
    raise UsageError(f"sync must be None, 'cuda' or a callable, not {sync!r}.")


class TimedIterator:
    """An iterator whose every ``next()`` is one timed data wait of its :class:`Watch`.

    What the integrations hand to a framework in place of the loader's
    iterator, so the wait is timed where the framework blocks on the loader,
    not between its hooks. Other attributes go to the wrapped iterator.

    For a consumer that fetches ahead of its loop (Lightning's fetcher on an
    unsized loader), ``ahead`` batches are fetched before the loop's first
    step: those ``next()`` calls belong to the first step's wait, not to
    steps of their own; and the loop's last step follows the ``next()`` that
    ends the stream, so ``stop_ends_wait`` makes that StopIteration close a
    step's wait instead of dropping it. By default StopIteration (and any
    error) drops the wait: no step follows.
    """

    __slots__ = ("_inner", "_watch", "_observed", "_ahead", "_stop_ends_wait")

    def __init__(
        self,
        inner: Iterator[Any],
        watch: WaitRecorder,
        *,
        ahead: int = 0,
        stop_ends_wait: bool = False,
    ) -> None:
        self._inner, self._watch, self._observed = inner, watch, False
        self._ahead, self._stop_ends_wait = ahead, stop_ends_wait

    def __iter__(self) -> TimedIterator:
        return self

    def __next__(self) -> Any:
        watch = self._watch
        watch.data_start()
        try:
            batch = next(self._inner)
        except StopIteration:
            if self._stop_ends_wait:
                watch.data_end()
            else:
                watch.cancel_wait()
            raise
        except BaseException:
            watch.cancel_wait()
            raise
        if self._ahead > 0:
            self._ahead -= 1  # fetched ahead: the wait goes on into the loop's first fetch
        else:
            watch.data_end()
        if not self._observed:
            # Wrappers (accelerate's lookahead generator) create the loader iterator on the first
            # next().
            self._observed = True
            watch.observe(self._inner)
        return batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
