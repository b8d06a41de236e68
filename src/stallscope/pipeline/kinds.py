"""Loader kinds: what a TARGET built, which knobs it has, and how a trial is built with other
values.

NOTE [loader kinds]
A target may return anything that yields batches. Each kind is one adapter
with the same small surface: which :class:`~stallscope.config.LoaderConfig`
fields it can vary (``knobs``), how a trial loader is built with other values
(``build``), and what stallscope cannot do on it and why (``limits``, one
sentence each, shown in reports as "not checked: …" instead of a finding or a
0 samples/s result). The kinds, chosen by what the target returns:

* ``dataset`` / ``dataloader`` — a Dataset, a dict, or a plain
  ``torch.utils.data.DataLoader``: trials are DataLoaders rebuilt from the
  user's parts (``pipeline/loaders.py``, NOTE [loader fidelity]).
* ``dataloader-subclass`` — ``StatefulDataLoader``, a streaming library's
  loader, a project's subclass: trials run **the user's own class and
  iterator**. The user's object is copied and the knobs set on the copy (the
  way a DataLoader stores them), so a constructor with required keyword-only
  arguments, state snapshots and a custom ``__iter__`` all stay.
* ``wrapped-dataloader`` — an object that holds a DataLoader (found by a
  bounded search of its attributes): the inner loader is tuned as above, and
  what is measured is the wrapper's output.
* ``torchdata-nodes`` (``graphs.py``) — a ``torchdata.nodes`` graph: ``ParallelMapper``'s
  ``num_workers``, ``method`` and ``in_order`` and ``Prefetcher``'s depth are
  knobs; a trial rebuilds the graph through each node's constructor.
* ``factory`` — the TARGET callable takes keyword parameters named like knobs
  (``num_workers``, ``prefetch_factor``, ``batch_size``, ``threads`` …): trials
  call it with other values, and the printed change is that call
  (``make_loader(num_workers=2)``). The user's own API comes first: this kind
  wins over every adapter that reconfigures what the factory returns (a copied
  subclass, a wrapper's loader, an iterable), since the factory may pass the
  knob on through arguments a copy never sees; only the adapters that rebuild
  the user's own call (a DataLoader from its parts, a ``torchdata.nodes`` graph
  through its constructors) keep theirs. The adapter of what the factory built
  stays (``inner``) for the probes that must put their own dataset or collate
  inside the loader. This is how a user opens any pipeline to tuning.
* ``iterable`` — any other iterable of batches: measured as it is, not tuned.

Batches of every kind but the rebuilt DataLoader are counted from the batch
itself (:func:`~stallscope.pipeline.structure.batch_length`), and the reference
structure every stand-in is held to (the printed code's batches, the
preflight) is the first batch of the user's own loader, not one collated from
the dataset's items: an ``IterableDataset`` that holds a DataLoader (webdataset's
``WebLoader``) is a wrapper, and a loader with ``batch_size=None`` yields its
dataset's items as batches.

NOTE [closing iterators]
Every iterator a probe opens is closed by :func:`close_trial` before the
probe's processes are reaped, never left to the garbage collector: a library
whose iterator joins its prefetch thread in ``__del__`` (grain's
``DatasetIterator``) would otherwise block the command at whatever line the
collector happened to run, with the thread waiting on worker processes that
stallscope had already reaped. So the iterators the trial's ``iter()`` made
(reachable from the iterator, not from the user's loader) have their own
``close()`` called, outermost first, on a daemon thread with a deadline. One
that overruns it is parked (kept alive, so no finalizer of it runs during the
command) and the ``stallscope`` program then ends without running finalizers
(``cli.entry``), after its report is written and its children reaped.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import threading
import types
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..config import LoaderConfig
from ..runtime.held_output import held_call
from .structure import as_built, shallow_copy

# Factory (and constructor) parameter names that are knobs, -> the LoaderConfig field they set.
KNOB_PARAMETERS: dict[str, str] = {
    "num_workers": "num_workers",
    "workers": "num_workers",
    "n_workers": "num_workers",
    "worker_count": "num_workers",  # grain's DataLoader
    "prefetch_factor": "prefetch_factor",
    "prefetch": "prefetch_factor",
    "batch_size": "batch_size",
    "persistent_workers": "persistent_workers",
    "pin_memory": "pin_memory",
    "in_order": "in_order",
    "multiprocessing_context": "multiprocessing_context",
    "threads": "worker_threads",
    "num_threads": "worker_threads",
    "worker_threads": "worker_threads",
    "method": "worker_method",
    "worker_method": "worker_method",
}
# How deep, and through how many objects, the search for a DataLoader inside a wrapper goes.
SEARCH_DEPTH = 3
SEARCH_OBJECTS = 500
# How long the iterators a trial opened get to close (NOTE [closing iterators]).
CLOSE_DEADLINE_S = 10.0


@dataclass
class LoaderKind:
    """The adapter for one kind of loader (NOTE [loader kinds])."""

    name: str
    description: str  # "a StatefulDataLoader subclass (mod.TheirLoader)"
    knobs: tuple[str, ...] = ()  # LoaderConfig fields a trial can change
    limits: dict[str, str] = field(
        default_factory=dict
    )  # operation -> why it cannot run on this kind
    counts_indices: bool = True  # samples per batch come from the sampler's index lists
    # Per-sample probes (check, stages, the in-process profile) may fetch ``dataset[i]`` for an
    # integer ``i``: not where the loader's sampler yields what ``__getitem__`` takes instead.
    fetches_by_index: bool = True
    choices: dict[str, tuple[Any, ...]] = field(
        default_factory=dict
    )  # values to try for the kind's own knobs

    @property
    def rebuilds_from_parts(self) -> bool:
        """Trials are DataLoaders built from the pipeline's parts (pipeline/loaders.py)."""
        return self.name in ("dataset", "dataloader")

    @property
    def tunable(self) -> bool:
        return bool(self.knobs)

    def label(self, config: LoaderConfig) -> str:
        """``config``'s label showing only the knobs this kind has ("as built" for none)."""
        return config.label() if self.rebuilds_from_parts else config.label(self.knobs)

    def build(self, config: LoaderConfig, **options: Any) -> Iterable[Any]:
        raise NotImplementedError(f"{self.name} trials are built from the pipeline's parts")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "knobs": list(self.knobs),
            "limits": dict(self.limits),
        }


DATALOADER_KNOBS = (
    "num_workers",
    "batch_size",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory",
    "in_order",
    "multiprocessing_context",
    "batched_fetch",
    "torch_threads",
    "worker_threads",
)


def parts_kind(source: str) -> LoaderKind:
    """A Dataset, dict or plain DataLoader: today's rebuilt-from-parts trials."""
    what = "a torch DataLoader" if source == "dataloader" else "a Dataset"
    return LoaderKind("dataloader" if source == "dataloader" else "dataset", what, DATALOADER_KNOBS)


# -- DataLoader subclasses: the user's object, copied, with other knobs ---------------------------


def is_dataloader(obj: Any) -> bool:
    """Whether ``obj`` is a DataLoader by its real class. A proxy that claims to be one through a
    ``__class__`` property (an adapter holding the DataLoader it delegates to) is not: setting knobs
    on it would set them beside the loader that runs, so it is treated as a wrapper."""
    from torch.utils.data import DataLoader

    return issubclass(type(obj), DataLoader)


def _qualified(obj: Any) -> str:
    cls = obj if inspect.isclass(obj) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass
class CopiedLoaderKind(LoaderKind):
    """Trials are copies of the user's own DataLoader (a subclass), knobs set on the copy."""

    loader: Any = None

    def build(self, config: LoaderConfig, **options: Any) -> Iterable[Any]:
        copy: Iterable[Any] = reconfigured_copy(self.loader, config, **options)
        return copy


def reconfigured_copy(
    loader: Any,
    config: LoaderConfig,
    *,
    batches: Iterable[list[int]] | None = None,
    dataset: Any = None,
    collate_fn: Any = None,
    timeout: float | None = None,
    worker_init_fn: Any = "keep",
) -> Any:
    """A shallow copy of ``loader`` (any DataLoader class) with ``config``'s knobs.

    The copy keeps the user's class, iterator and every attribute; what a
    DataLoader checks only in ``__init__`` (``batch_sampler``, ``dataset``,
    ``persistent_workers``) is set past its ``__setattr__`` guard, the way the
    constructor itself stores it. ``batches`` replaces the index lists (a cycling
    batch sampler over the user's own), ``dataset`` the dataset (worker threads, or a probe's
    instrumented copy) and ``collate_fn`` the collate (a probe's timed one).
    """
    from torch.utils.data import BatchSampler

    clone = shallow_copy(loader)
    state = clone.__dict__
    state["_iterator"] = None
    put = object.__setattr__
    workers = config.num_workers
    put(clone, "num_workers", workers)
    put(clone, "prefetch_factor", config.prefetch_factor if workers else None)
    put(clone, "persistent_workers", bool(config.persistent_workers and workers))
    put(clone, "pin_memory", bool(config.pin_memory and _cuda()))
    if "in_order" in state:
        put(clone, "in_order", bool(config.in_order or not workers))
    clone.multiprocessing_context = config.multiprocessing_context if workers else None
    if timeout is not None and workers and not loader.timeout:
        put(clone, "timeout", timeout)
    if worker_init_fn != "keep":
        put(clone, "worker_init_fn", worker_init_fn)
    if config.snapshot_every_n_steps is not None and "snapshot_every_n_steps" in state:
        put(clone, "snapshot_every_n_steps", config.snapshot_every_n_steps)
    if dataset is None and not workers:
        # Fetched in this process: what the fetch sets (a file opened on first use) lands on a
        # copy, not on the dataset a later copy forks or pickles into its workers (as_built).
        dataset = as_built(loader.dataset)
    if dataset is not None:
        put(clone, "dataset", dataset)
    if collate_fn is not None:
        put(clone, "collate_fn", collate_fn)
    if batches is not None:
        put(clone, "batch_sampler", batches)
        put(clone, "batch_size", None)
        put(clone, "drop_last", False)
    elif loader.batch_size is not None and config.batch_size != loader.batch_size:
        put(
            clone,
            "batch_sampler",
            BatchSampler(loader.sampler, config.batch_size, loader.drop_last),
        )
        put(clone, "batch_size", config.batch_size)
    return clone


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# -- loaders inside wrappers -----------------------------------------------------------------------

Path = tuple[tuple[str, Any], ...]  # ("attr", name) | ("item", index or key)


def find_all(
    obj: Any, wanted: Callable[[Any], bool], *, depth: int = SEARCH_DEPTH
) -> list[tuple[Path, Any]]:
    """Every distinct object ``wanted`` accepts among ``obj``'s attributes, items and their own (not
    inside one already found), with the path it was first reached by: breadth first, at most
    ``depth`` levels and ``SEARCH_OBJECTS`` objects."""
    found: list[tuple[Path, Any]] = []

    def take(path: Path, current: Any) -> bool:
        if wanted(current):
            found.append((path, current))
            return True
        return False

    _breadth_first(obj, depth, take_object=take)
    return found


def _breadth_first(
    obj: Any,
    depth: int,
    *,
    take_object: Callable[[Path, Any], bool] | None = None,
    take_reference: Callable[[Path, Any], bool] | None = None,
) -> None:
    """Walk ``obj``'s attributes and items breadth first, each object once, at most ``depth``
    levels and ``SEARCH_OBJECTS`` objects. ``take_object(path, obj)`` sees each object reached
    (not ``obj`` itself), ``take_reference(path, child)`` every reference met, a repeated one too;
    what either takes (returns True for) is not walked into."""
    seen = {id(obj)}
    queue: deque[tuple[Path, Any]] = deque([((), obj)])
    visited = 0
    while queue and visited < SEARCH_OBJECTS:
        path, current = queue.popleft()
        visited += 1
        if path and take_object is not None and take_object(path, current):
            continue
        if len(path) >= depth:
            continue
        for step, child in _children(current):
            child_path = (*path, step)
            if take_reference is not None and take_reference(child_path, child):
                continue
            if id(child) in seen or _atomic(child):
                continue
            seen.add(id(child))
            queue.append((child_path, child))


def _atomic(obj: Any) -> bool:
    import numpy as np
    import torch

    # Modules are never walked: through them the search would reach the interpreter's own state
    # (``threading._shutdown`` is a callable named ``_shutdown``, and calling it ends every pool).
    atoms = (str, bytes, int, float, bool, torch.Tensor, np.ndarray, type, types.ModuleType)
    return obj is None or isinstance(obj, atoms) or (callable(obj) and inspect.isroutine(obj))


def _children(obj: Any) -> Iterator[tuple[tuple[str, Any], Any]]:
    if isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj[:64]):
            yield ("item", i), value
        return
    if isinstance(obj, dict):
        for key, value in list(obj.items())[:64]:
            yield ("item", key), value
        return
    state = getattr(obj, "__dict__", None)
    if isinstance(state, dict):
        for name, value in list(state.items()):
            yield ("attr", name), value


def path_text(path: Path) -> str:
    """``.loader``, ``.stages[0]``, ``["train"]``: the path as Python source after a variable."""
    out = ""
    for kind, key in path:
        out += f".{key}" if kind == "attr" else f"[{key!r}]"
    return out


def replaced_at(obj: Any, path: Path, value: Any) -> Any:
    """A copy of ``obj`` with the object at ``path`` replaced by ``value`` (containers on the way
    copied)."""
    if not path:
        return value
    (kind, key), rest = path[0], path[1:]
    child = getattr(obj, key) if kind == "attr" else obj[key]
    new_child = replaced_at(child, rest, value)
    if isinstance(obj, tuple):
        items = list(obj)
        items[key] = new_child
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        out = list(obj)
        out[key] = new_child
        return out
    if isinstance(obj, dict):
        out_dict = copy.copy(obj)
        out_dict[key] = new_child
        return out_dict
    out_obj = shallow_copy(obj)
    object.__setattr__(out_obj, key, new_child)
    return out_obj


def paths_to(obj: Any, target: Any, *, depth: int = SEARCH_DEPTH) -> list[Path]:
    """Every path from ``obj`` to ``target`` (bounded like :func:`find_all`): a wrapper may hold
    its loader twice (a dict of loaders and the flat list it really iterates)."""
    found: list[Path] = []

    def take(path: Path, child: Any) -> bool:
        if child is target:
            found.append(path)
            return True
        return False

    _breadth_first(obj, depth, take_reference=take)
    return found


class _TaggedBatches:
    """The user's batch sampler, noting when it is iterated: a DataLoader iterator over a loader
    that holds it starts by iterating it, so the tag says whether that loader is the one that
    ran."""

    def __init__(self, batches: Any) -> None:
        self.batches = batches
        self.iterated = False

    def __iter__(self) -> Iterator[Any]:
        self.iterated = True
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def effective_path(wrapper: Any, inner: Any, paths: list[Path]) -> Path | None:
    """The first of ``paths`` where a replaced DataLoader is the one the wrapper iterates, by taking
    a batch through it (NOTE [loader kinds]); None when none is. A wrapper that builds its
    iteration from another reference (a flat list made in its constructor) would otherwise be
    "tuned" by trials that all ran its original loader."""
    if inner.batch_sampler is None:
        return paths[0] if paths else None  # no index lists to recognise it by: taken as it is
    config = LoaderConfig(num_workers=0, batch_size=inner.batch_size or 1)
    raised = 0
    for path in paths:
        tag = _TaggedBatches(inner.batch_sampler)
        trial = iterator = None
        try:
            trial = replaced_at(wrapper, path, reconfigured_copy(inner, config, batches=tag))
            iterator = iter(trial)
            next(iterator)
            if tag.iterated:
                return path
        except Exception:
            raised += 1
        finally:
            close_trial(trial, iterator)
    return (
        paths[0] if paths and raised == len(paths) else None
    )  # a wrapper that raises: preflight says so


@dataclass
class WrappedLoaderKind(LoaderKind):
    """The user's object with the DataLoader at ``path`` replaced by a reconfigured copy."""

    wrapper: Any = None
    path: Path = ()
    inner: Any = None

    def build(self, config: LoaderConfig, **options: Any) -> Iterable[Any]:
        wrapper: Iterable[Any] = replaced_at(
            self.wrapper, self.path, reconfigured_copy(self.inner, config, **options)
        )
        return wrapper


# -- factories whose parameters are knobs ----------------------------------------------------------


def knob_parameters(factory: Callable[..., Any]) -> dict[str, tuple[str, Any]]:
    """``{parameter: (LoaderConfig field, default)}`` for the factory's keyword parameters named
    like knobs."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return {}
    out = {}
    for p in params:
        field_name = KNOB_PARAMETERS.get(p.name)
        if (
            field_name
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.default is not p.empty
        ):
            out[p.name] = (field_name, p.default)
    return out


def factory_arguments(
    parameters: dict[str, tuple[str, Any]], config: LoaderConfig, baseline: LoaderConfig
) -> dict[str, Any]:
    """The keyword arguments that give ``config`` through the factory: only knobs that differ from
    its own."""
    out = {}
    for name, (field_name, _default) in parameters.items():
        value = getattr(config, field_name)
        if field_name == "worker_threads" and not value:
            continue  # 0 is "no fetch threads" in a LoaderConfig: the factory's own default
        if value != getattr(baseline, field_name) and value is not None:
            out[name] = value
    return out


@dataclass
class FactoryKind(LoaderKind):
    """Trials call the user's factory with other values of its knob parameters."""

    factory: Callable[..., Any] | None = None
    parameters: dict[str, tuple[str, Any]] = field(default_factory=dict)
    baseline: LoaderConfig | None = None
    # The adapter of what the factory built, where it has one (a copied subclass, a wrapper's
    # loader): probes that must put their own dataset or collate inside the loader use it.
    inner: LoaderKind | None = None

    def build(self, config: LoaderConfig, **options: Any) -> Iterable[Any]:
        assert self.factory is not None and self.baseline is not None
        with held_call():  # NOTE [held output]
            built: Iterable[Any] = self.factory(
                **factory_arguments(self.parameters, config, self.baseline)
            )
        return built


def factory_baseline(
    parameters: dict[str, tuple[str, Any]], product: Any, built: LoaderConfig | None = None
) -> LoaderConfig:
    """The factory's defaults as a LoaderConfig (the batch size from the product when it says).
    A default of None ("the project's own choice") reads the value from ``built``, the config of
    what the factory returned, where it is known."""
    values: dict[str, Any] = {}
    for _name, (field_name, default) in parameters.items():
        if default is not None:
            values[field_name] = default
        elif built is not None and getattr(built, field_name, None) is not None:
            values[field_name] = getattr(built, field_name)
    own = getattr(product, "batch_size", None)
    if "batch_size" in values:
        values["batches_itself"] = False  # a parameter of the factory: a setting it takes
    elif own is None and built is not None:
        # What the factory built batches itself, or holds the loader that says its batch size.
        values.update(batch_size=built.batch_size, batches_itself=built.batches_itself)
    values.setdefault("batch_size", own or 1)
    values.setdefault("batches_itself", own is None)
    values["batch_size"] = max(1, int(values["batch_size"]))
    if isinstance(values.get("worker_threads"), bool) or not isinstance(
        values.get("worker_threads", 0), int
    ):
        values.pop("worker_threads", None)
    try:
        return LoaderConfig(**values)
    except (TypeError, ValueError):
        return LoaderConfig(
            batch_size=values["batch_size"],
            num_workers=int(values.get("num_workers") or 0),
            batches_itself=values["batches_itself"],
        )


def is_one_shot(obj: Any) -> bool:
    """An iterator (a generator, a file-like stream): iterating it again continues, never
    restarts."""
    try:
        return iter(obj) is obj
    except TypeError:
        return False


ONE_SHOT = (
    "{what} is a one-shot iterator: a measurement would use up the batches the next "
    "one needs. Pass "
    "a function that returns a fresh one (TARGET path/to/file.py:fn); each pass then "
    "calls it again."
)


@dataclass
class IterableKind(LoaderKind):
    """Any other iterable of batches: measured as it is. A one-shot iterator (a generator) is made
    anew for each pass by calling the TARGET factory again (``factory``)."""

    loader: Any = None
    factory: Callable[[], Any] | None = None

    def build(self, config: LoaderConfig, **options: Any) -> Iterable[Any]:
        loader: Iterable[Any] = self.loader
        if not is_one_shot(loader):
            return loader
        if self.factory is None:
            from ..errors import UsageError

            raise UsageError(ONE_SHOT.format(what=self.description))
        with held_call():  # NOTE [held output]
            fresh: Iterable[Any] = self.factory()
        return fresh


UNTUNABLE = (
    "{what} exposes no knob stallscope can set; it is measured as it is. To tune it, "
    "give the TARGET "
    "function keyword parameters such as num_workers=… or prefetch_factor=… and pass "
    "them on: trials then call "
    "it with other values."
)
NO_DATASET = "{what} has no Dataset for stallscope's per-sample probes to fetch from"


def dataset_limits(what: str) -> dict[str, str]:
    """What the per-sample probes cannot do on a loader without a Dataset of its own. ``stages``
    and ``check`` run on it all the same: the stages it declares (NOTE [declared stages] in
    breakdown/declared.py) and the checks that read the whole process tree
    (checks/pipeline_checks.py)."""
    return {"profile": NO_DATASET.format(what=what)}


# -- shutting a trial down -------------------------------------------------------------------------


def close_trial(loader: Any, iterator: Any, *, deadline: float = CLOSE_DEADLINE_S) -> None:
    """Stop whatever a trial started (NOTE [closing iterators]): DataLoader iterators inside it (in
    generator frames or attributes), torchdata nodes' threads and processes, the iterators the
    trial opened that have a ``close()`` of their own, open generators."""
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    from ..runtime.processes import shutdown_iterator

    from_iterator = _reachable(iterator) if iterator is not None else []
    from_loader = _reachable(loader) if loader is not None else []
    targets = from_iterator + from_loader
    done: set[int] = set()
    for obj in targets:
        if id(obj) in done:
            continue
        done.add(id(obj))
        if isinstance(obj, _BaseDataLoaderIter):
            shutdown_iterator(obj)
        elif inspect.ismethod(getattr(obj, "_shutdown", None)):  # a node's or an iterator's own
            with contextlib.suppress(Exception):
                obj._shutdown()
    opened = [] if iterator is loader else _opened_iterators(from_iterator, from_loader)
    if opened and not _close_within(opened, deadline):
        park(loader, iterator, *opened)
    for obj in targets:
        if inspect.isgenerator(obj):
            with contextlib.suppress(Exception):
                obj.close()


def terminate_pools(*roots: Any) -> int:
    """Terminate the ``multiprocessing`` pools reachable from ``roots`` while their processes are
    alive; returns how many. For objects built only to be thrown away (a printed snippet's run):
    a pool whose processes are killed first (``no_orphans``) can never be terminated, since a
    killed idle worker holds the lock its terminate must take, and the garbage collector's
    finaliser then hangs the command (``stallscope bench`` did, on a loader that starts a
    ``Pool`` in ``__iter__``). Trials do not call this: a loader keeps its pool for its next
    epoch."""
    from multiprocessing.pool import Pool

    done = 0
    for root in roots:
        for obj in _reachable(root):
            if isinstance(obj, Pool):
                with contextlib.suppress(Exception):
                    obj.terminate()
                    done += 1
    return done


def _opened_iterators(from_iterator: list[Any], from_loader: list[Any]) -> list[Any]:
    """Iterators the trial's ``iter()`` made that carry a ``close()``: reachable from the iterator
    but not from the loader (what the loader holds is the user's and lives on), outermost
    first. Files and generators are left out (a generator is closed after; a file is data)."""
    before = {id(obj) for obj in from_loader}
    return [
        obj
        for obj in from_iterator
        if id(obj) not in before
        and not isinstance(obj, io.IOBase)
        and not inspect.isgenerator(obj)
        and inspect.ismethod(getattr(obj, "close", None))
        and callable(getattr(type(obj), "__next__", None))
    ]


def _close_within(objects: list[Any], deadline: float) -> bool:
    """Call each object's ``close()`` on a daemon thread; False when they were not all done by
    ``deadline`` seconds (a close that joins a thread waiting on something that will not come)."""

    def close_all() -> None:
        for obj in objects:
            with contextlib.suppress(Exception):
                obj.close()

    closer = threading.Thread(target=close_all, name="stallscope-close", daemon=True)
    closer.start()
    closer.join(deadline)
    return not closer.is_alive()


# Objects whose close() overran its deadline: kept alive here so that no finalizer of theirs runs
# (and blocks) in the middle of a command; ``stallscope`` then ends without running finalizers.
_PARKED: list[Any] = []


def park(*objects: Any) -> None:
    """Keep ``objects`` from being garbage-collected for the rest of the process."""
    _PARKED.extend(obj for obj in objects if obj is not None)


def parked() -> bool:
    """Whether a close overran its deadline in this process (NOTE [closing iterators])."""
    return bool(_PARKED)


def _reachable(root: Any, limit: int = SEARCH_OBJECTS) -> list[Any]:
    """Objects reachable from ``root`` through attributes, containers and generator frames
    (bounded)."""
    out: list[Any] = []
    queue, seen = deque([(root, 0)]), {id(root)}
    while queue and len(out) < limit:
        obj, depth = queue.popleft()
        out.append(obj)
        if depth >= 6:
            continue
        children: list[Any] = []
        frame = getattr(obj, "gi_frame", None)
        if inspect.isgenerator(obj) and frame is not None:
            children.extend(frame.f_locals.values())
        children.extend(child for _, child in _children(obj))
        for child in children:
            if id(child) in seen or _atomic(child):
                continue
            seen.add(id(child))
            queue.append((child, depth + 1))
    return out
