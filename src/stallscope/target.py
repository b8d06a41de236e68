"""Loading the user's pipeline from a TARGET (``file.py:fn`` or ``pkg.mod:fn``).

The callable takes no arguments and returns a Dataset, a DataLoader (whose
settings become the user's baseline config) or a dict with ``dataset`` and
optionally ``collate_fn``, ``batch_size``, ``model``, ``train_step``.

Worker processes must be able to import whatever the dataset pickles by
reference under every start method. A file target is therefore imported by
its module name with its folder put first on ``sys.path``; multiprocessing
hands ``sys.path`` to spawn/forkserver children, so they import it the same way.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader, Dataset, IterableDataset
from torch.utils.data.dataloader import default_collate

from .config import LoaderConfig, config_from_loader
from .errors import UsageError, describe_exception
from .loader_call import Argument, LoaderCall
from .pipeline.arguments import describe_dataset_call, describe_loader
from .pipeline.graphs import NodesKind, is_nodes_graph, nodes_baseline, other_method
from .pipeline.kinds import (
    DATALOADER_KNOBS,
    UNTUNABLE,
    CopiedLoaderKind,
    FactoryKind,
    IterableKind,
    LoaderKind,
    WrappedLoaderKind,
    dataset_limits,
    effective_path,
    factory_baseline,
    find_all,
    is_dataloader,
    knob_parameters,
    parts_kind,
    path_text,
    paths_to,
)
from .pipeline.kinds import Path as ObjectPath
from .pipeline.resolve import resolve_callable, split_spec
from .pipeline.threaded import ThreadedDataset
from .runtime.processes import shutdown_iterator

DEFAULT_BATCH_SIZE = 32


@dataclass
class Pipeline:
    """Everything stallscope needs to rebuild the user's loader with other knobs."""

    dataset: Any
    batch_size: int
    baseline: LoaderConfig
    collate_fn: Callable[[list[Any]], Any] | None = None
    shuffle: bool = False
    drop_last: bool = False
    worker_init_fn: Callable[[int], None] | None = None
    model: Any = None
    train_step: Callable[..., Any] | None = None
    target: str = "<object>"
    source: str = "dataset"  # "dataset" | "dict" | "dataloader" | "loader" | "wrapper"
    extras: dict[str, Any] = field(default_factory=dict)
    # The user's own loader parts, kept in every trial (NOTE [loader fidelity] in
    # pipeline/arguments.py).
    sampler: Any = None  # their index sampler (None: sequential, or random when ``shuffle``)
    batch_sampler: Any = None  # their batch sampler, when it decides the batches (batch_size=None)
    generator: Any = None
    timeout: float = 0.0
    pin_memory_device: str = ""
    call: LoaderCall | None = None  # how they built it (for recommendations as a change to it)
    kind: LoaderKind = field(default_factory=lambda: parts_kind("dataset"))  # NOTE [loader kinds]

    @property
    def has_dataset(self) -> bool:
        """Whether per-sample probes (check, stages, the in-process profile) can fetch from a
        dataset."""
        return self.dataset is not None and self.kind.fetches_by_index

    @property
    def is_iterable(self) -> bool:
        return isinstance(self.dataset, IterableDataset)

    def length(self) -> int | None:
        """``len(dataset)``, or None for an iterable dataset without a length."""
        try:
            return len(self.dataset)
        except TypeError:
            return None

    def batches_per_epoch(self) -> int | None:
        """Batches in one epoch of the user's loader: its batch sampler's length where that
        decides the batches, else the dataset's length in batches (the last one short unless
        ``drop_last``); None where either is unsized."""
        own = self.batch_sampler
        if own is None and self.baseline.batches_itself and not self.is_iterable:
            own = self.sampler  # automatic batching off: each of its items is a batch
        if own is not None:
            try:
                return len(own)
            except TypeError:
                return None
        length = self.length()
        if length is None or self.batch_size < 1:
            return None
        return length // self.batch_size if self.drop_last else math.ceil(length / self.batch_size)

    @property
    def collate(self) -> Callable[[list[Any]], Any]:
        return self.collate_fn or default_collate


def load_target(
    target: str | Any,
    *,
    batch_size: int | None = None,
    collate: str | Callable[[list[Any]], Any] | None = None,
) -> Pipeline:
    """Load TARGET into a :class:`Pipeline`.

    ``target`` may be a spec string, a zero-argument callable, or directly a
    Dataset, DataLoader or dict. ``batch_size`` and ``collate`` override what
    the target says (the CLI's ``--batch-size`` and ``--collate``).
    """
    label = (
        target
        if isinstance(target, str)
        else getattr(target, "__qualname__", type(target).__name__)
    )
    obj: Any = target
    modules: tuple[str, ...] = ()
    factory: Callable[..., Any] | None = None
    if isinstance(target, str):
        factory = resolve_callable(target)
        modules = (getattr(factory, "__module__", None) or "",)
        obj = _call_factory(factory, target)
    elif callable(target) and not _is_loader_object(target):
        factory = target
        modules = (getattr(target, "__module__", None) or "",)
        obj = _call_factory(target, label)
    pipeline = pipeline_from_object(obj, label=str(label), modules=modules)
    if factory is not None:
        _adopt_factory(pipeline, factory, target if isinstance(target, str) else None, obj)
    if collate is not None:
        pipeline.collate_fn = resolve_callable(collate) if isinstance(collate, str) else collate
        _set_argument(pipeline, "collate_fn", pipeline.collate_fn)
    if batch_size is not None:
        if batch_size < 1:
            raise UsageError(f"--batch-size must be at least 1, not {batch_size}.")
        if pipeline.batch_sampler is not None:
            raise UsageError(
                "the loader's batch_sampler decides its batch sizes; --batch-size "
                "cannot override it "
                "(build the loader with batch_size= instead, or leave --batch-size out)."
            )
        pipeline.batch_size = batch_size
        pipeline.baseline = pipeline.baseline.replace(batch_size=batch_size)
        _set_argument(pipeline, "batch_size", batch_size)
    if pipeline.call is not None:
        pipeline.call.knobs = pipeline.baseline.to_dict()
    return pipeline


def _is_loader_object(obj: Any) -> bool:
    """Already what a factory would return (a Dataset, DataLoader, dict or loader), not a
    factory."""
    return (
        isinstance(obj, (Dataset, DataLoader, dict))
        or is_nodes_graph(obj)
        or hasattr(obj, "__iter__")
    )


def factory_origin(factory: Callable[..., Any], spec: str | None) -> tuple[list[str], str] | None:
    """(imports, expression) that call the TARGET factory again in the user's own code, where it
    can be named: ``from train import make_loader`` / ``make_loader()``."""
    from .pipeline.arguments import _importable

    if spec is not None:
        where, name = split_spec(spec)
        module = (
            Path(where).stem if where.endswith(".py") or "/" in where or "\\" in where else where
        )
        top = name.split(".")[0]
        return [f"from {module} import {top}"], f"{name}()"
    qualname = getattr(factory, "__qualname__", None)
    line = _importable(getattr(factory, "__module__", None), qualname, factory)
    return ([line], f"{qualname}()") if line and qualname else None


def _adopt_factory(
    pipeline: Pipeline, factory: Callable[..., Any], spec: str | None, product: Any
) -> None:
    """Record how the user's factory is called again (snippets), and make its knob parameters the
    trials' knobs where no adapter can reconfigure what it built (NOTE [loader kinds])."""
    parameters = knob_parameters(factory)
    origin = factory_origin(factory, spec)
    if pipeline.call is None and origin is not None:
        pipeline.call = LoaderCall(
            callable="", imports=[], arguments=[], knobs=pipeline.baseline.to_dict()
        )
    if pipeline.call is not None:
        if origin is not None:
            pipeline.call.origin_imports, pipeline.call.origin = origin
            pipeline.call.origin_is_loader = pipeline.source in ("dataloader", "loader", "wrapper")
        pipeline.call.factory_parameters = {
            name: field_name for name, (field_name, _) in parameters.items()
        }
    if isinstance(pipeline.kind, IterableKind):
        pipeline.kind.factory = factory  # a generator is made anew for each pass
    if not parameters or not _factory_first(pipeline.kind):
        return
    baseline = factory_baseline(parameters, product, pipeline.baseline)
    knobs = tuple(sorted({f for f, _ in parameters.values()}))
    # Every trial is the baseline with other values: its label shows what the call passes.
    baseline = baseline.replace(label_knobs=knobs)
    what = pipeline.kind.description
    inner = pipeline.kind if pipeline.kind.tunable else None
    pipeline.kind = FactoryKind(
        "factory",
        f"{what}, built by {getattr(factory, '__qualname__', 'the target')}() with knob parameters",
        knobs=knobs,
        limits=dict(pipeline.kind.limits),
        counts_indices=False,
        fetches_by_index=pipeline.kind.fetches_by_index,
        factory=factory,
        parameters=parameters,
        baseline=baseline,
        inner=inner,
    )
    pipeline.kind.limits.pop("tune", None)
    pipeline.baseline = baseline
    pipeline.batch_size = baseline.batch_size
    if pipeline.call is not None:
        pipeline.call.knobs = baseline.to_dict()


def _factory_first(kind: LoaderKind) -> bool:
    """Whether trials go through the user's factory rather than the kind's own adapter (NOTE
    [loader kinds]): always, except where the adapter rebuilds the user's own call (a DataLoader
    from its parts, a torchdata.nodes graph through each node's constructor), which is their API
    as much as the factory is. A copy of a subclass or of a wrapper's loader with knobs set on it
    is not: the factory may pass the knob on through arguments the copy never sees."""
    return kind.name not in ("dataset", "dataloader", "torchdata-nodes")


def _set_argument(pipeline: Pipeline, name: str, value: Any) -> None:
    """Record a CLI override in the description of the user's call (they asked for it)."""
    from .pipeline.arguments import reference

    if pipeline.call is None:
        return
    new = Argument(name, repr(value)) if isinstance(value, int) else reference(name, value)
    args = pipeline.call.arguments
    for i, arg in enumerate(args):
        if arg.name == name:
            args[i] = new
            return
    args.append(new)


def _call_factory(factory: Callable[..., Any], label: str) -> Any:
    try:
        return factory()
    except UsageError:
        raise
    except TypeError as exc:
        raise UsageError(
            f"{label} must take no arguments; calling it raised {describe_exception(exc)}."
        ) from exc
    except Exception as exc:
        raise UsageError(f"{label} raised {describe_exception(exc)} when called.") from exc


def pipeline_from_object(
    obj: Any, *, label: str = "<object>", modules: tuple[str, ...] = ()
) -> Pipeline:
    """A Pipeline from what the target returned; ``modules`` may hold the user's objects as
    globals."""
    if is_dataloader(obj):
        return _from_loader(obj, label, modules)
    if is_nodes_graph(obj):
        return _from_nodes(obj, label)
    if isinstance(obj, dict):
        if "dataset" not in obj:
            raise UsageError(f"{label} returned a dict without a 'dataset' key.")
        inner = obj["dataset"]
        if is_dataloader(inner):
            pipeline = _from_loader(inner, label, modules)
        else:
            _require_dataset(inner, label)
            bs = int(obj.get("batch_size") or DEFAULT_BATCH_SIZE)
            pipeline = Pipeline(
                dataset=inner, batch_size=bs, baseline=LoaderConfig(batch_size=bs), target=label
            )
        pipeline.source = "dict"
        if obj.get("batch_size"):
            pipeline.batch_size = int(obj["batch_size"])
            pipeline.baseline = pipeline.baseline.replace(batch_size=pipeline.batch_size)
        if obj.get("collate_fn") is not None:
            pipeline.collate_fn = obj["collate_fn"]
        pipeline.model = obj.get("model")
        pipeline.train_step = obj.get("train_step")
        pipeline.extras = {
            k: v
            for k, v in obj.items()
            if k not in {"dataset", "batch_size", "collate_fn", "model", "train_step"}
        }
        if not is_dataloader(inner):
            pipeline.call = describe_dataset_call(
                inner, pipeline.batch_size, pipeline.collate_fn, modules=modules
            )
            pipeline.call.role_paths = {"dataset": '["dataset"]', "collate_fn": '["collate_fn"]'}
        elif pipeline.call is not None:
            pipeline.call.prefix_paths('["dataset"]')
        return pipeline
    if not _looks_like_dataset(obj) or _holds_loader(obj):
        return _from_other(obj, label, modules)
    return _from_dataset(obj, label, modules)


def _from_dataset(dataset: Any, label: str, modules: tuple[str, ...]) -> Pipeline:
    """A dataset on its own: the default batch size, described as the DataLoader call over it."""
    return Pipeline(
        dataset=dataset,
        batch_size=DEFAULT_BATCH_SIZE,
        baseline=LoaderConfig(batch_size=DEFAULT_BATCH_SIZE),
        target=label,
        call=describe_dataset_call(dataset, DEFAULT_BATCH_SIZE, modules=modules),
    )


def _qualified(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _copy_knobs(loader: DataLoader[Any]) -> tuple[str, ...]:
    """What a reconfigured copy of this loader can vary (NOTE [loader kinds])."""
    knobs = [k for k in DATALOADER_KNOBS if k not in ("batched_fetch",)]
    if isinstance(loader.dataset, IterableDataset):
        knobs.remove("worker_threads")  # fetch threads take a batch of indices: a stream has none
    elif loader.batch_size is None and loader.batch_sampler is None:
        # Its sampler decides what a batch is, and each fetch is one call: no batch size to set,
        # no batch of indices for fetch threads to share.
        knobs = [k for k in knobs if k not in ("batch_size", "worker_threads")]
    if "snapshot_every_n_steps" in vars(loader):
        knobs.append("snapshot_every_n_steps")
    try:
        params = inspect.signature(type(loader).__init__).parameters.values()
    except (TypeError, ValueError):
        return tuple(knobs)
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        # Only what its constructor takes can be recommended (fetch threads wrap a dataset it builds
        # itself).
        names = {p.name for p in params} | {"torch_threads"}
        knobs = [k for k in knobs if k in names or (k == "worker_threads" and "dataset" in names)]
    return tuple(knobs)


def _copy_choices(loader: DataLoader[Any]) -> dict[str, tuple[Any, ...]]:
    """Values worth trying for a subclass's own knobs: StatefulDataLoader's snapshot interval
    (a snapshot copies worker state every N steps; a longer interval costs less)."""
    own = vars(loader).get("snapshot_every_n_steps")
    if not isinstance(own, int):
        return {}
    return {"snapshot_every_n_steps": tuple(n for n in (max(own * 16, 64),) if n != own)}


def _holds_loader(obj: Any) -> bool:
    """An IterableDataset that holds a DataLoader (webdataset's ``WebLoader`` is a
    ``DataPipeline`` over one): it yields that loader's batches, not samples to batch."""
    return isinstance(obj, IterableDataset) and bool(find_all(obj, is_dataloader))


def _looks_like_dataset(obj: Any) -> bool:
    """A Dataset, or a duck-typed map-style one (a list, an array): what a DataLoader batches."""
    return isinstance(obj, Dataset) or (hasattr(obj, "__getitem__") and hasattr(obj, "__len__"))


def _from_nodes(graph: Any, label: str) -> Pipeline:
    """A torchdata.nodes graph: its mappers' and prefetcher's settings are the knobs."""
    baseline, knobs, problems = nodes_baseline(graph)
    what = f"a torchdata.nodes graph ({type(graph).__name__})"
    limits = dataset_limits(what)
    if problems:
        limits["tune"] = f"{what} cannot be rebuilt with other settings: {problems[0]}"
        knobs = ()
    kind: LoaderKind
    if knobs:
        kind = NodesKind(
            "torchdata-nodes",
            what,
            knobs,
            limits,
            counts_indices=False,
            choices={"worker_method": other_method(graph)},
            graph=graph,
        )
    else:
        limits.setdefault("tune", UNTUNABLE.format(what=what))
        kind = IterableKind("iterable", what, (), limits, counts_indices=False, loader=graph)
    return Pipeline(
        dataset=None,
        batch_size=baseline.batch_size,
        baseline=baseline,
        target=label,
        source="loader",
        kind=kind,
    )


def _from_other(obj: Any, label: str, modules: tuple[str, ...]) -> Pipeline:
    """A wrapper around a DataLoader (found by a bounded search), or any other iterable of
    batches."""
    if not hasattr(obj, "__iter__") or isinstance(obj, (str, bytes)):
        raise UsageError(
            f"{label} returned a {type(obj).__name__}; expected a Dataset, a "
            "DataLoader, an iterable of batches "
            "or a dict with 'dataset'."
        )
    # An IterableDataset that holds a DataLoader (webdataset's WebLoader is a DataPipeline over
    # one) yields that loader's batches: re-batching them as a Dataset's samples would stack
    # batches, so it is a wrapper whatever its base class says.
    loaders = find_all(obj, is_dataloader)
    if loaders:
        return _from_wrapper(obj, loaders, label, modules)
    if isinstance(obj, IterableDataset):
        return _from_dataset(obj, label, modules)
    what = f"an iterable of batches ({_qualified(obj)})"
    limits = dataset_limits(what)
    limits["tune"] = UNTUNABLE.format(what=what)
    return Pipeline(
        dataset=None,
        batch_size=1,
        baseline=LoaderConfig(batch_size=1, batches_itself=True),
        target=label,
        source="loader",
        kind=IterableKind("iterable", what, (), limits, counts_indices=False, loader=obj),
    )


def _from_wrapper(
    obj: Any, loaders: list[tuple[ObjectPath, Any]], label: str, modules: tuple[str, ...]
) -> Pipeline:
    """An object that holds DataLoaders: the first one whose replacement changes what the object
    iterates is tuned inside it (NOTE [loader kinds]); when none does, it is measured as it is."""
    for _, inner in loaders:
        path = effective_path(obj, inner, paths_to(obj, inner))
        if path is not None:
            break
    else:
        path, inner = None, loaders[0][1]
    first = loaders[0][0] if path is None else path
    where = path_text(first)
    what = f"a {type(obj).__qualname__} holding a DataLoader at {where.lstrip('.')}"
    if len(loaders) > 1 and path is not None:
        what += f" (the first of the {len(loaders)} it holds whose knobs take effect)"
    pipeline = _from_loader(inner, label, modules)
    if path is None:
        # Trials would all run the wrapper's own loader: measured as it is, said so.
        limits = dataset_limits(what) | {
            "tune": (
                f"{what} keeps iterating its own DataLoader when the one at "
                f"{where.lstrip('.')} is replaced, so its "
                "knobs cannot be changed from outside; it is measured as it is. To "
                "tune it, give the TARGET function "
                "keyword parameters such as num_workers=… and pass them on"
            )
        }
        return Pipeline(
            dataset=None,
            batch_size=pipeline.batch_size,
            baseline=pipeline.baseline,
            target=label,
            source="loader",
            kind=IterableKind("iterable", what, (), limits, counts_indices=False, loader=obj),
        )
    pipeline.kind = WrappedLoaderKind(
        "wrapped-dataloader",
        what,
        _copy_knobs(inner),
        counts_indices=False,
        wrapper=obj,
        path=path,
        inner=inner,
    )
    pipeline.source = "wrapper"
    pipeline.collate_fn = _unbatched_collate(inner) or pipeline.collate_fn
    if pipeline.call is not None:
        pipeline.call.loader_path = where
        pipeline.call.prefix_paths(where)
    return pipeline


def _require_dataset(obj: Any, label: str) -> None:
    if isinstance(obj, Dataset):
        return
    if hasattr(obj, "__getitem__") and hasattr(obj, "__len__"):
        return  # duck-typed map-style dataset (a list, a NumPy array...)
    if hasattr(obj, "__iter__") and not isinstance(obj, (str, bytes)):
        return
    raise UsageError(
        f"{label} returned a {type(obj).__name__}; expected a Dataset, a DataLoader or "
        "a dict with 'dataset'."
    )


def _from_loader(loader: DataLoader[Any], label: str, modules: tuple[str, ...] = ()) -> Pipeline:
    """The user's loader as it is (NOTE [loader fidelity] in pipeline/arguments.py)."""
    from torch.utils.data import RandomSampler, SequentialSampler
    from torch.utils.data._utils.collate import default_convert

    holds_iterator = _stop_live_iterators(loader)
    call = describe_loader(loader, modules=modules)
    baseline = config_from_loader(loader)
    collate = (
        loader.collate_fn if loader.collate_fn not in (default_collate, default_convert) else None
    )
    sampler = getattr(loader, "sampler", None)
    batch_sampler = loader.batch_sampler if call.batching == "batch_sampler" else None
    if batch_sampler is not None and call.batch_sizes:
        # Their batches vary: estimates (memory, items per batch) use the mean size.
        baseline = baseline.replace(batch_size=max(1, round(call.batch_sizes["mean"])))
    dataset = loader.dataset
    if isinstance(dataset, ThreadedDataset):
        # The user's own ss.threaded_dataset: its thread count is a knob of the baseline, like
        # num_workers.
        baseline = baseline.replace(worker_threads=dataset.threads)
        dataset = dataset.dataset
    call.knobs = baseline.to_dict()
    shuffle = isinstance(sampler, RandomSampler)
    own_sampler = (
        sampler if batch_sampler is None and type(sampler) is not SequentialSampler else None
    )
    kind = parts_kind("dataloader")
    unbatched = (
        loader.batch_size is None
        and loader.batch_sampler is None
        and not isinstance(dataset, IterableDataset)
    )
    if type(loader) is DataLoader and unbatched and not holds_iterator:
        # Automatic batching off over a map-style dataset: what its sampler yields (a list of
        # indices, a CutSet) is what ``__getitem__`` makes a whole batch of. A loader rebuilt from
        # the parts would fetch one integer index per sample and collate those, other batches than
        # the user's: trials are copies of the loader itself (NOTE [loader kinds]).
        what = (
            "a torch DataLoader without automatic batching (batch_size=None: its sampler yields "
            "what __getitem__ makes a batch of)"
        )
        kind = CopiedLoaderKind(
            "unbatched-dataloader",
            what,
            _copy_knobs(loader),
            limits=dataset_limits(what),
            counts_indices=False,
            fetches_by_index=False,
            loader=loader,
        )
    elif type(loader) is not DataLoader and holds_iterator:
        # Its iterator was started by the class itself and is shared by any copy: trials are
        # DataLoaders over its parts (sampler, collate, worker_init_fn), said so.
        kind = replace(
            parts_kind("dataloader"),
            description=(
                f"a DataLoader subclass ({_qualified(loader)}) that starts its own "
                f"iterator ({holds_iterator}), "
                "timed as a torch DataLoader over its parts"
            ),
        )
    elif type(loader) is not DataLoader:
        # Trials run the user's own class and iterator (NOTE [loader kinds]).
        kind = CopiedLoaderKind(
            "dataloader-subclass",
            f"a DataLoader subclass ({_qualified(loader)})",
            _copy_knobs(loader),
            choices=_copy_choices(loader),
            loader=loader,
        )
    if not kind.rebuilds_from_parts:
        collate = _unbatched_collate(loader) or collate
    return Pipeline(
        kind=kind,
        dataset=dataset,
        batch_size=baseline.batch_size,
        baseline=baseline,
        collate_fn=collate,
        shuffle=shuffle,
        drop_last=bool(loader.drop_last),
        worker_init_fn=loader.worker_init_fn,
        target=label,
        source="dataloader",
        sampler=own_sampler,
        batch_sampler=batch_sampler,
        generator=loader.generator,
        timeout=float(loader.timeout or 0.0),
        pin_memory_device=getattr(loader, "pin_memory_device", "") or "",
        call=call,
    )


def _unbatched_collate(loader: DataLoader[Any]) -> Callable[[Any], Any] | None:
    """torch's ``default_convert`` where the loader does not batch (``batch_size=None``): each item
    its dataset yields is a batch already (webdataset's ``.batched()`` in the workers), converted,
    never collated; probes that run the user's own loader keep it so. None otherwise."""
    from torch.utils.data._utils.collate import default_convert

    if loader.batch_size is None and loader.batch_sampler is None:
        if loader.collate_fn is default_convert:
            return default_convert
    return None


def _stop_live_iterators(loader: DataLoader[Any]) -> str | None:
    """Shut down iterators the user's loader already started (a subclass that iterates in
    ``__init__``, persistent workers): we take the loader over, and its workers must not linger.

    Returns the attribute holding an iterator the class keeps for itself (not torch's own
    ``_iterator``): a copy of such a loader would share it, so it cannot be copied."""
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    own = None
    for name, value in list(vars(loader).items()):
        if isinstance(value, _BaseDataLoaderIter):
            shutdown_iterator(value)
            if name == "_iterator":
                loader._iterator = None
            else:
                own = own or f"self.{name}"
    return own
