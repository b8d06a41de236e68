"""The objects that travel to the DataLoader workers and time each stage there
(NOTE [stage timing] in ``recorder.py``): the dataset wrapped in :class:`InstrumentedDataset`
(or :class:`InstrumentedIterableDataset`), each transform in a :class:`TimedTransform`
proxy, the collate function in :class:`TimedCollate`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import IterableDataset

from .callees import OTHER_TRACED, TRACE_EVERY, CalleeTracer
from .known_calls import _KnownCalls
from .recorder import _ACTIVE, COLLATE, OTHER, StageBatch, StageRecorder, process_recorder


class _PassesForInner:
    """A wrapper that passes for the object it wraps (``inner``, set by the subclass's
    ``__init__``): unknown attributes are read from it and ``__class__`` reports its class."""

    def __getattr__(self, attr: str) -> Any:
        try:
            inner = object.__getattribute__(self, "inner")
        except AttributeError:
            raise AttributeError(attr) from None
        return getattr(inner, attr)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(object.__getattribute__(self, "inner"))


class TimedTransform(_PassesForInner):
    """A transform that times itself as stage ``name``; otherwise it is the transform.

    Attribute access is forwarded and ``__class__`` reports the wrapped class, so
    pipelines that inspect their transforms (albumentations checks types and
    reads ``p``) see the original.
    """

    def __init__(self, name: str, inner: Callable[..., Any]) -> None:
        self.stage_name = name
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        recorder = _ACTIVE.get()
        if recorder is None:
            return self.inner(*args, **kwargs)
        recorder.push(self.stage_name)
        try:
            return self.inner(*args, **kwargs)
        finally:
            recorder.pop()

    def __reduce__(self) -> tuple[Any, ...]:
        return (TimedTransform, (self.stage_name, self.inner))

    def __repr__(self) -> str:
        return f"TimedTransform({self.stage_name!r}, {self.inner!r})"


class SkippedTransform:
    """Stands in for a random transform in the no-augmentation baseline: passes its input on."""

    def __init__(self, name: str) -> None:
        self.stage_name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs and not args:  # albumentations style: t(image=...) -> dict
            return dict(kwargs)
        if len(args) == 1 and not kwargs:
            return args[0]
        return args

    def __repr__(self) -> str:
        return f"SkippedTransform({self.stage_name!r})"


# Whether fetches break ``other`` down by the calls ``__getitem__`` makes (callees.py); the
# probe sets it on the dataset wrapper, which carries it to the workers.
def _start_getitem(callees: bool) -> tuple[StageRecorder, Any, CalleeTracer | None]:
    recorder = process_recorder()
    if not _KnownCalls.depth:
        from torch.utils.data import get_worker_info

        if get_worker_info() is not None:
            _KnownCalls.install()  # a worker is ours for its whole life: install once
    else:
        _KnownCalls.refresh()
    token = _ACTIVE.set(recorder)
    recorder.begin_sample()
    recorder.fetches += 1
    tracer = None
    # Every TRACE_EVERY-th fetch is traced (callees.py); a nested fetch keeps the outer tracer.
    if callees and recorder.tracer is None and recorder.fetches % TRACE_EVERY == 0:
        tracer = CalleeTracer(recorder, sys._getframe(1))
        tracer.start()  # before "other" opens: setting the hook up is not the user's time
    recorder.push(OTHER_TRACED if tracer is not None else OTHER, traced=True)
    return recorder, token, tracer


def _end_getitem(
    recorder: StageRecorder, token: Any, tracer: CalleeTracer | None, samples: int
) -> None:
    if tracer is not None:
        tracer.close_call()
    recorder.pop()
    if tracer is not None:
        tracer.stop()
    recorder.end_sample(samples)
    _ACTIVE.reset(token)


class _StandsInForInner(_PassesForInner):
    """What both instrumented datasets share: they pass for the user's dataset they wrap.

    A library's loader calls its own methods on the dataset it holds (litdata's
    ``reset_state_dict``, ``set_epoch``), and must reach them; it checks the class of that dataset
    too (litdata's StreamingDataLoader takes another path for anything not a StreamingDataset).
    ``inner`` and ``callees`` are set by the subclass's ``__init__``.
    """

    inner: Any
    callees: bool

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # protocols are the wrapper's own
            raise AttributeError(attr)
        return super().__getattr__(attr)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.inner, self.callees))


class InstrumentedDataset(_StandsInForInner):
    """A map-style dataset whose ``__getitem__`` runs under this process's stage recorder."""

    def __init__(self, inner: Any, callees: bool = True) -> None:
        self.inner = inner
        self.callees = callees
        if not callable(getattr(inner, "__getitems__", None)):
            # The fetcher then indexes item by item, like the original: it skips a falsy
            # __getitems__, so the method is shadowed per instance on purpose.
            self.__getitems__ = None  # type: ignore[method-assign,assignment]

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: Any) -> Any:
        recorder, token, tracer = _start_getitem(self.callees)
        try:
            return self.inner[index]
        finally:
            _end_getitem(recorder, token, tracer, 1)

    def __getitems__(self, indices: list[Any]) -> Any:
        recorder, token, tracer = _start_getitem(self.callees)
        try:
            return self.inner.__getitems__(indices)
        finally:
            _end_getitem(recorder, token, tracer, len(indices))


class InstrumentedIterableDataset(_StandsInForInner, IterableDataset[Any]):
    """An iterable dataset whose every ``next()`` runs under the stage recorder."""

    def __init__(self, inner: Any, callees: bool = True) -> None:
        self.inner = inner
        self.callees = callees

    def __iter__(self) -> Iterator[Any]:
        recorder, token, tracer = _start_getitem(self.callees)
        try:
            iterator = iter(self.inner)
        finally:
            _end_getitem(recorder, token, tracer, 0)
        while True:
            recorder, token, tracer = _start_getitem(self.callees)
            try:
                item = next(iterator)
            except StopIteration:
                _end_getitem(recorder, token, tracer, 0)
                return
            except BaseException:
                _end_getitem(recorder, token, tracer, 0)
                raise
            _end_getitem(recorder, token, tracer, 1)
            yield item


class TimedCollate:
    """Times the collate function and attaches the worker's stage totals to the batch."""

    def __init__(self, collate: Callable[[list[Any]], Any]) -> None:
        self.collate = collate

    def __call__(self, samples: Any) -> StageBatch:
        from torch.utils.data import get_worker_info

        recorder = process_recorder()
        token = _ACTIVE.set(recorder)
        before = recorder.totals.get(COLLATE, 0.0)
        recorder.push(COLLATE)
        try:
            batch = self.collate(samples)
        finally:
            recorder.pop()
            _ACTIVE.reset(token)
        recorder.note_batch(COLLATE, recorder.totals.get(COLLATE, 0.0) - before, recorder.samples)
        times, count, sample_times = recorder.take()
        info = get_worker_info()
        worker = info.id if info is not None else -1
        return StageBatch(batch, times, count, worker, time.monotonic(), sample_times)
