"""Stages of pipelines that are not a Dataset in a DataLoader: a ``torchdata.nodes`` graph, a
thread-pool or process-pool pipeline object, any iterable of batches.

NOTE [declared stages]
Such a pipeline has no ``__getitem__`` for the worker probes to instrument;
its stages are the callables it declares itself, and each is timed where it
runs (``stage_clock.py``: in-process for threads, a file per process for
worker processes), on a copy, never on the user's object:

* a ``torchdata.nodes`` graph is rebuilt through its nodes' constructors
  (``graphs.py``) with every ``Mapper``'s and ``ParallelMapper``'s ``map_fn``
  timed, and each node's own ``next`` (a ``Batcher``'s batching, a sampler's
  draw) timed exclusive of the stages it calls; a node whose ``next`` only
  takes what its own threads or processes made (a ``ParallelMapper`` with
  workers, a ``Prefetcher``) is a wait, not a stage;
* any other pipeline object is shallow-copied and the callables it holds (its
  attributes that are functions, bound methods or callable objects, and its
  class's own methods) replaced on the copy by timed ones, so the thread
  pool's ``executor.map(self.decode, …)``, a pipeline library's ``map``
  stages built from them in ``__iter__``, or a process pool's workers call the
  timed ones. Calls nest: a method that calls another is charged its own time.

The copy is iterated as the user iterates it, a few batches to warm up, then
until ``batches`` or ``max_seconds``, and the table is the measurement window
shared out: each call keeps the spans it ran itself, and each instant of the
window is divided equally among the stages running at it, in any thread or
process (``wall_shares``). A row is its stage's share of the window per batch;
the instants in which no declared stage ran anywhere are a row of their own,
"between stages": the hand-over (items in a mapper's queues, pickled to and
from its worker processes, the pipeline's own code between its callables). So
the rows add up to the measured interval between batches, and ``adds_up`` is
the part the declared stages account for.

Dividing each stage's time by its own runners instead (what each stage would
cost if it had its threads to itself) adds up only where one path of stages
sets the pace. Where stages run side by side on shared cores (two mappers'
threads decoding and augmenting at once, each call stretched by the other) that
sum overshoots the interval (1.4× on a JPEG graph with two thread mappers,
``benchmarks/declared_stage_accuracy.py``); where the items go to worker
processes and back it falls short, by the pickling and queueing no declared
callable contains (0.47× on the same graph with process mappers). That figure
stays in the record per row (``busy_ms_per_batch``) beside the cost of one call
where it ran (p50, p90). The main thread's wait is reported beside the rows.
"""

from __future__ import annotations

import contextlib
import inspect
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import NotMeasured, describe_exception
from ..pipeline.kinds import close_trial
from ..pipeline.structure import batch_length, shallow_copy
from .declared_table import DeclaredStageRun, declared_table
from .results import ProgressFn, StagesResult
from .stage_clock import StageChannel

WARMUP_BATCHES = 3
# Classes whose objects are machinery, not stages, when found among a pipeline's attributes.
_MACHINERY_MODULES = (
    "builtins",
    "concurrent.",
    "threading",
    "multiprocessing",
    "queue",
    "logging",
    "asyncio",
    "_thread",
    "torch.utils.data",
)
_NOT_STAGES = {"__iter__", "__next__", "__len__", "state_dict", "load_state_dict", "close"}


def declared_stages(
    pipeline: Any,
    *,
    batches: int = 40,
    max_seconds: float = 15.0,
    progress: ProgressFn | None = None,
) -> StagesResult:
    """The stage table of a pipeline from the stages it declares (NOTE [declared stages])."""
    config = pipeline.baseline
    with tempfile.TemporaryDirectory(prefix="stallscope-stages-") as folder:
        channel = StageChannel(Path(folder))
        try:
            try:
                loader, found = instrumented(pipeline.kind, config, channel.wrap)
            except Exception as exc:  # a copy or rebuild stallscope makes, not the user's object
                raise NotMeasured(
                    f"a copy of {pipeline.kind.description} with its stages timed could not be "
                    f"made: {describe_exception(exc)}"
                ) from exc
            if not found:
                raise NotMeasured(
                    f"{pipeline.kind.description} declares no stage stallscope can time: it "
                    "holds no map function, transform or method its iteration calls (give the "
                    "object the callables it maps as attributes, or build it as a "
                    "torchdata.nodes graph)"
                )
            run, window = _iterate(loader, batches, max_seconds, progress)
            calls = channel.calls()
        finally:
            channel.close()
    samples, measured, seconds, interval_ms = run
    rows, figures = declared_table(calls, samples=samples, batches=measured, window=window)
    if not rows:
        raise NotMeasured(
            f"none of the callables {pipeline.kind.description} holds was called while it "
            f"iterated ({', '.join(sorted(found)[:6])}): its stages are not among them"
        )
    stage_run = DeclaredStageRun(
        num_workers=max(
            (d["runners"] for d in figures["declared"] if d["where"] != "main"), default=0
        ),
        batch_size=max(1, round(samples / max(1, measured))),
        start_method=None,
        device=None,
        samples=samples,
        batches=measured,
        warmup_batches=WARMUP_BATCHES,
        seconds=seconds,
        transforms_found=len(found),
        batch_interval_ms=interval_ms,
        kind=pipeline.kind.name,
        **figures,
    )
    return StagesResult(
        stages=rows, augmentation_overhead=None, hotspots=[], run=stage_run, notes=[]
    )


def instrumented(
    kind: Any, config: Any, timed: Callable[[Callable[..., Any], str], Any]
) -> tuple[Iterable[Any], list[str]]:
    """A fresh copy of the kind's pipeline with its declared stages timed, and their names."""
    from ..pipeline.graphs import NodesKind, is_nodes_graph

    if isinstance(kind, NodesKind):
        return _timed_graph(kind, config, timed)
    built = kind.build(config)
    if is_nodes_graph(built):
        return _timed_graph(
            NodesKind("torchdata-nodes", kind.description, graph=built), config, timed
        )
    return timed_object(built, timed)


def _timed_graph(
    kind: Any, config: Any, timed: Callable[[Callable[..., Any], str], Any]
) -> tuple[Iterable[Any], list[str]]:
    names: list[str] = []

    def record(fn: Callable[..., Any], name: str) -> Any:
        names.append(name)
        return timed(fn, name)

    loader = kind.build(config, timed=record)
    return loader, names


class TimedItems:
    """A DataLoader's dataset whose ``__getitem__`` is a declared stage: a loader whose sampler
    yields what ``__getitem__`` takes (``batch_size=None``: lhotse's samplers yield CutSets) does
    its work there, which no attribute of the loader holds. Module-level, so spawn workers unpickle
    it."""

    def __init__(self, dataset: Any, getitem: Callable[[Any], Any]) -> None:
        self.dataset = dataset
        self.getitem = getitem

    def __getitem__(self, index: Any) -> Any:
        return self.getitem(index)

    def __len__(self) -> int:
        return len(self.dataset)


def _timed_items(
    loader: Any, timed: Callable[[Callable[..., Any], str], Any]
) -> tuple[TimedItems, str] | None:
    """``loader``'s dataset with its ``__getitem__`` timed, and the stage's name, where the loader
    hands it whole batches (``batch_size=None``, map-style), else None."""
    from torch.utils.data import DataLoader, IterableDataset

    dataset = getattr(loader, "dataset", None)
    if (
        not isinstance(loader, DataLoader)
        or loader.batch_size is not None
        or dataset is None
        or isinstance(dataset, IterableDataset)
    ):
        return None
    name = f"{type(dataset).__name__}.__getitem__"
    return TimedItems(dataset, timed(dataset.__getitem__, name)), name


def timed_object(
    obj: Any, timed: Callable[[Callable[..., Any], str], Any]
) -> tuple[Any, list[str]]:
    """A shallow copy of ``obj`` with the callables it holds and its class's own methods timed."""
    copy = shallow_copy(obj)
    state = getattr(copy, "__dict__", None)
    if not isinstance(state, dict):
        return obj, []
    names: list[str] = []
    items = _timed_items(obj, timed)
    if items is not None:  # set in the copy's state: a DataLoader refuses a new dataset once built
        state["dataset"], name = items
        names.append(name)
    for name, value in list(state.items()):
        if name.startswith("__") or not _is_stage(value):
            continue
        state[name] = timed(value, name)
        names.append(name)
    for cls in type(obj).__mro__:
        if _machinery(cls):
            continue
        for name, attr in vars(cls).items():
            if (
                name in state
                or name in _NOT_STAGES
                or name.startswith("__")
                or not inspect.isfunction(attr)
                or inspect.isgeneratorfunction(attr)
            ):
                continue
            state[name] = timed(getattr(copy, name), name)
            names.append(name)
    return copy, names


def _machinery(cls: type) -> bool:
    return cls is object or any(
        cls.__module__ == m.rstrip(".") or cls.__module__.startswith(m) for m in _MACHINERY_MODULES
    )


def _is_stage(value: Any) -> bool:
    """A callable a pipeline may call per item: a function, bound method or callable object, not
    a class, a module, a pool or a lock."""
    if value is None or inspect.isclass(value) or inspect.ismodule(value) or not callable(value):
        return False
    if inspect.isfunction(value) or inspect.ismethod(value):
        return not inspect.isgeneratorfunction(value)
    if inspect.isbuiltin(value):
        return False
    return not _machinery(type(value))


def _iterate(
    loader: Iterable[Any], batches: int, max_seconds: float, progress: ProgressFn | None
) -> tuple[tuple[int, int, float, float | None], tuple[float, float]]:
    """Warm up, then take up to ``batches`` batches (or ``max_seconds``): ``(samples, batches,
    seconds, ms per batch)`` and the window on the monotonic clock."""
    iterator: Any = None
    started = time.perf_counter()
    try:
        iterator = iter(loader)
        for _ in range(WARMUP_BATCHES):
            if next(iterator, None) is None:
                break
        window_start = time.monotonic()
        samples = taken = 0
        while taken < batches and time.monotonic() - window_start < max_seconds:
            batch = next(iterator, None)
            if batch is None:
                break
            samples += batch_length(batch)
            taken += 1
            if progress is not None:
                progress("timing the declared stages", taken / batches)
        window_end = time.monotonic()
    except Exception as exc:
        # The copy with timed stages is stallscope's stand-in: what it raised is said, not a
        # failure of the user's pipeline (NOTE [verified stand-ins] in probe.py).
        raise NotMeasured(
            f"the copy of the pipeline with its stages timed raised {describe_exception(exc)}"
        ) from exc
    finally:
        with contextlib.suppress(Exception):
            close_trial(loader, iterator)
    if taken == 0:
        raise NotMeasured("the pipeline yielded no batch after its warm-up, so no stage was timed")
    elapsed = window_end - window_start
    return (samples, taken, time.perf_counter() - started, elapsed * 1000.0 / taken), (
        window_start,
        window_end,
    )
