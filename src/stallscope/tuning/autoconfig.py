"""``ss.make_loader``: a DataLoader from a tuned, cached, given or hardware-aware config.

``config="auto"`` (no measurement) follows :func:`auto_config`'s rule:

1. An ``IterableDataset`` stays single-process unless its ``__iter__`` consults
   ``get_worker_info()`` (otherwise every worker would replay the whole stream).
2. An in-memory ``TensorDataset`` (or a ``Subset`` of one) is fetched a batch
   at a time (``batched_fetch``) in the main process: worker IPC would cost more
   than the indexing.
3. Fewer than 4 batches per epoch: no workers (their start-up outweighs the epoch).
4. Otherwise ``num_workers`` = the usable cores (affinity and cgroup quota,
   not ``os.cpu_count()``) when there are at most 4, else cores − 1 (one core
   for the training loop), never more than the batches per epoch.
5. ``persistent_workers`` with workers; ``pin_memory`` when CUDA is available;
   ``prefetch_factor=2``; ``worker_init_fn=ss.seed_worker``.

``config="tuned"`` runs :func:`stallscope.tune` once and caches the pick under
``$STALLSCOPE_CACHE`` (default ``~/.cache/stallscope``), keyed by a dataset
fingerprint, the batch size, the host (name, cores, memory, GPU) and the torch
version; later calls with the same key reuse it without measuring.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..config import LoaderConfig
from ..errors import UsageError
from ..pipeline.inspection import shards_by_worker
from ..pipeline.seeding import ChainedWorkerInit, seed_worker
from ..pipeline.threaded import threaded_dataset
from ..runtime.host import cache_root, cuda_available, usable_cores

_CONFIG_FIELDS = {f.name for f in fields(LoaderConfig)}


# -- the hardware-aware rule --------------------------------------------------------------


@dataclass
class AutoDecision:
    config: LoaderConfig
    reasons: list[str] = field(default_factory=list)


def _is_tensor_dataset(dataset: Any) -> bool:
    from torch.utils.data import Subset, TensorDataset

    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return isinstance(dataset, TensorDataset)


def auto_config(
    dataset: Any, batch_size: int, *, cores: int | None = None, cuda: bool | None = None
) -> AutoDecision:
    """Hardware-aware defaults without measuring (the rule in the module docstring)."""
    from torch.utils.data import IterableDataset

    cores = cores or usable_cores()
    cuda = cuda_available() if cuda is None else cuda
    reasons: list[str] = []
    base = LoaderConfig(batch_size=batch_size, pin_memory=cuda)
    if cuda:
        reasons.append(
            "CUDA is available: pin_memory=True for faster, asynchronous host-to-device copies"
        )
    if isinstance(dataset, IterableDataset):
        if not shards_by_worker(dataset):
            reasons.append(
                "an IterableDataset that does not shard by get_worker_info() would repeat in every "
                "worker: 0 workers"
            )
            return AutoDecision(base, reasons)
        workers = cores if cores <= 4 else cores - 1
        reasons.append(
            f"the IterableDataset shards by worker: {workers} workers for {cores} usable core(s)"
        )
        return AutoDecision(base.replace(num_workers=workers, persistent_workers=True), reasons)
    if _is_tensor_dataset(dataset):
        reasons.append(
            "in-memory TensorDataset: whole batches indexed at once in the main process "
            "(batched_fetch)"
        )
        return AutoDecision(base.replace(batched_fetch=True), reasons)
    try:
        length = len(dataset)
    except TypeError:
        length = None
    batches = math.ceil(length / batch_size) if length else None
    if batches is not None and batches < 4:
        reasons.append(
            f"{batches} batch(es) per epoch: worker start-up would outweigh the epoch, 0 workers"
        )
        return AutoDecision(base, reasons)
    workers = cores if cores <= 4 else cores - 1
    if batches is not None:
        workers = min(workers, batches)
    reasons.append(
        f"{workers} workers for {cores} usable core(s)"
        + ("" if cores <= 4 else " (one core left to the training loop)")
    )
    return AutoDecision(base.replace(num_workers=workers, persistent_workers=workers > 0), reasons)


# -- the tuning cache --------------------------------------------------------------------------


_SCALARS = (str, int, float, bool, type(None))


def dataset_fingerprint(dataset: Any) -> dict[str, Any]:
    """What identifies a dataset across runs: its type, length, item structure and scalar settings.

    Scalar public attributes (paths, sizes, names) are included, so the same
    class over another folder gets another key; array contents are not hashed.
    """
    from ..pipeline.structure import describe_structure

    cls = type(dataset)
    print_: dict[str, Any] = {"type": f"{cls.__module__}.{cls.__qualname__}"}
    try:
        print_["length"] = len(dataset)
    except TypeError:
        print_["length"] = None
    if print_["length"]:
        try:
            print_["item"] = describe_structure(dataset[0])
        except Exception as exc:  # an unreadable item still gets a key
            print_["item"] = f"<{type(exc).__name__}>"
    tensors = getattr(dataset, "tensors", None)
    if isinstance(tensors, tuple):
        print_["tensors"] = [describe_structure(t) for t in tensors]
    attrs = {}
    for name, value in sorted(getattr(dataset, "__dict__", {}).items()):
        if name.startswith("_"):
            continue
        if isinstance(value, _SCALARS) or isinstance(value, Path):
            attrs[name] = repr(value)[:200]
        elif (
            isinstance(value, (tuple, list))
            and len(value) <= 16
            and all(isinstance(v, _SCALARS) for v in value)
        ):
            attrs[name] = repr(value)[:200]
        elif callable(value):
            attrs[name] = getattr(value, "__qualname__", type(value).__qualname__)
    print_["attrs"] = attrs
    return print_


def host_fingerprint() -> dict[str, Any]:
    import psutil
    import torch

    gpu = None
    if cuda_available():
        try:
            gpu = torch.cuda.get_device_name(0)
        except Exception:
            gpu = "cuda"
    return {
        "host": platform.node(),
        "cores": usable_cores(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30),
        "gpu": gpu,
        "torch": torch.__version__,
        "python": platform.python_version().rsplit(".", 1)[0],
    }


def cache_key(
    dataset: Any,
    batch_size: int,
    *,
    collate_fn: Callable[..., Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """SHA-256 (first 24 hex digits) over dataset fingerprint, batch size, collate, host and torch
    version."""
    material = {
        "dataset": dataset_fingerprint(dataset),
        "batch_size": batch_size,
        "collate": None
        if collate_fn is None
        else getattr(collate_fn, "__qualname__", type(collate_fn).__qualname__),
        "host": host_fingerprint(),
        "extra": extra or {},
    }
    blob = json.dumps(material, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


class TuneCache:
    """Tuned configs on disk, one JSON file per key under ``<root>/tune/``."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = cache_root(root) / "tune"

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> LoaderConfig | None:
        path = self.path(key)
        try:
            data = json.loads(path.read_text())
            return LoaderConfig.from_dict(data["config"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a corrupt or outdated entry is re-tuned, not fatal

    def put(self, key: str, config: LoaderConfig, **meta: Any) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.path(key)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {"config": config.to_dict(), "saved_at": time.time(), **meta}, indent=2, default=str
            )
        )
        tmp.replace(path)  # atomic: a concurrent reader sees the old or the new file, never half
        return path


# -- worker_init_fn ---------------------------------------------------------------------------


def _worker_init(
    seed_workers: bool, user_fn: Callable[[int], Any] | None
) -> Callable[[int], Any] | None:
    if not seed_workers:
        return user_fn
    if user_fn is None or user_fn is seed_worker:
        return seed_worker
    return ChainedWorkerInit(seed_worker, user_fn)


# -- make_loader --------------------------------------------------------------------------------


def resolve_config(
    dataset: Any,
    batch_size: int | None,
    config: str | Path | LoaderConfig,
    *,
    collate_fn: Callable[..., Any] | None = None,
    shuffle: bool = False,
    drop_last: bool = False,
    tune_budget_s: float = 60.0,
    cache_dir: str | Path | None = None,
) -> tuple[LoaderConfig, str]:
    """The config ``make_loader`` will use, and where it came from (given/file/auto/cache/tuned)."""
    if isinstance(config, LoaderConfig):
        return (config.replace(batch_size=batch_size) if batch_size else config), "given"
    bs = batch_size or 32
    if config == "auto":
        return auto_config(dataset, bs).config, "auto"
    if config == "tuned":
        cache = TuneCache(cache_dir)
        key = cache_key(dataset, bs, collate_fn=collate_fn)
        cached = cache.get(key)
        if cached is not None:
            return cached.replace(batch_size=bs), "cache"
        result = _tune_dataset(
            dataset,
            bs,
            collate_fn=collate_fn,
            shuffle=shuffle,
            drop_last=drop_last,
            budget_s=tune_budget_s,
        )
        cache.put(
            key,
            result.config,
            samples_per_s=result.samples_per_s,
            baseline_samples_per_s=result.baseline_samples_per_s,
            confidence=result.confidence,
            tuning_seconds=result.tuning_seconds,
            fingerprint=dataset_fingerprint(dataset),
            host=host_fingerprint(),
        )
        return result.config, "tuned"
    path = Path(config)
    if not path.is_file():
        raise UsageError(
            f"config must be 'auto', 'tuned', a LoaderConfig or a YAML file; {str(config)!r} is "
            "none of these."
        )
    try:
        loaded = LoaderConfig.load(path)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{path} is not a LoaderConfig YAML: {exc}.") from exc
    return (loaded.replace(batch_size=batch_size) if batch_size else loaded), "file"


def _tune_dataset(
    dataset: Any,
    batch_size: int,
    *,
    collate_fn: Callable[..., Any] | None,
    shuffle: bool,
    drop_last: bool,
    budget_s: float,
) -> Any:
    from ..target import Pipeline
    from .tuner import tune

    pipeline = Pipeline(
        dataset=dataset,
        batch_size=batch_size,
        baseline=LoaderConfig(batch_size=batch_size),
        collate_fn=collate_fn,
        shuffle=shuffle,
        drop_last=drop_last,
        target=f"make_loader({type(dataset).__name__})",
    )
    return tune(pipeline, budget_s=budget_s)


def make_loader(
    dataset: Any,
    batch_size: int | None = None,
    config: str | Path | LoaderConfig = "auto",
    *,
    shuffle: bool = False,
    collate_fn: Callable[..., Any] | None = None,
    drop_last: bool = False,
    sampler: Any = None,
    generator: Any = None,
    worker_init_fn: Callable[[int], Any] | None = None,
    seed_workers: bool = True,
    tune_budget_s: float = 60.0,
    cache_dir: str | Path | None = None,
    **overrides: Any,
) -> Any:
    """A ``torch.utils.data.DataLoader`` for ``dataset`` with a tuned or hardware-aware config.

    ``config``: ``"auto"`` (rule above, no measuring), ``"tuned"`` (tune once,
    then reuse the cached result), a :class:`LoaderConfig`, or a path to its
    YAML (``stallscope tune --emit yaml``). ``batch_size`` overrides the
    config's. ``overrides`` that name LoaderConfig fields replace them
    (``num_workers=4``); any other keyword goes to the DataLoader
    (``timeout=30``). Workers are seeded with :func:`stallscope.seed_worker`
    (then ``worker_init_fn``) unless ``seed_workers=False``.

    The chosen config is on ``loader.stallscope_config`` and its origin on
    ``loader.stallscope_source``. ``torch_threads`` in the config calls
    ``torch.set_num_threads`` in this process; ``worker_threads`` wraps the
    dataset in :func:`stallscope.threaded_dataset` (``loader.dataset`` is the wrapper).
    """
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    chosen, source = resolve_config(
        dataset,
        batch_size,
        config,
        collate_fn=collate_fn,
        shuffle=shuffle,
        drop_last=drop_last,
        tune_budget_s=tune_budget_s,
        cache_dir=cache_dir,
    )
    knob_overrides = {k: v for k, v in overrides.items() if k in _CONFIG_FIELDS}
    extra = {k: v for k, v in overrides.items() if k not in _CONFIG_FIELDS}
    if knob_overrides:
        try:
            chosen = chosen.replace(**knob_overrides)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"invalid loader override: {exc}.") from exc
    kwargs = chosen.to_kwargs()
    if chosen.pin_memory and not cuda_available():
        kwargs["pin_memory"] = False
    init = _worker_init(seed_workers, worker_init_fn)
    if chosen.num_workers > 0 and init is not None:
        kwargs["worker_init_fn"] = init
    kwargs.update(extra)
    if chosen.torch_threads is not None:
        torch.set_num_threads(chosen.torch_threads)
    iterable = isinstance(dataset, IterableDataset)
    if chosen.worker_threads:
        if iterable:
            raise UsageError(
                "worker_threads needs a map-style dataset (a batch of indices to fetch "
                f"concurrently); {type(dataset).__name__} is an IterableDataset."
            )
        dataset = threaded_dataset(dataset, chosen.worker_threads)
    if chosen.batched_fetch and not iterable:
        from ..pipeline.batching import batched_loader
        from ..target import Pipeline

        pipeline = Pipeline(
            dataset=dataset,
            batch_size=chosen.batch_size,
            baseline=chosen,
            collate_fn=collate_fn,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        loader = batched_loader(
            pipeline, chosen, kwargs, sampler=sampler, drop_last=drop_last, generator=generator
        )
    else:
        if iterable:
            loader = DataLoader(
                dataset, collate_fn=collate_fn, drop_last=drop_last, generator=generator, **kwargs
            )
        else:
            loader = DataLoader(
                dataset,
                shuffle=shuffle if sampler is None else False,
                sampler=sampler,
                collate_fn=collate_fn,
                drop_last=drop_last,
                generator=generator,
                **kwargs,
            )
    loader.stallscope_config = chosen
    loader.stallscope_source = source
    return loader
