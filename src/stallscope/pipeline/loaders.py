"""Building DataLoaders from a :class:`Pipeline` and a :class:`LoaderConfig`.

A trial loader is the user's loader with other knobs (NOTE [loader fidelity] in
``arguments.py``): their dataset, sampler or batch_sampler, collate_fn,
worker_init_fn, generator, drop_last, timeout and pin_memory_device.

Probes measure steady state, so with ``cycle`` the loader walks the user's
epochs one after another (:class:`CyclingBatches`: each pass re-iterates the
user's own sampler or batch sampler, a new epoch to it): no epoch boundary (and
its worker restart) lands inside a measurement window. Epoch start-up is
measured separately. ``sizes`` receives the length of every index list the
sampler yields, in order, so a probe counts the samples a batch really holds.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler

from ..config import LoaderConfig
from ..errors import UsageError
from ..runtime.processes import TORCH_WORKER_WARNING
from ..target import Pipeline
from .structure import as_built
from .threaded import ThreadedDataset, threaded_dataset


@contextlib.contextmanager
def quiet_worker_warning() -> Iterator[None]:
    """Silence torch's "suggested max number of worker" warning: more workers than
    cores is a configuration we measure on purpose (latency-bound sources need it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=TORCH_WORKER_WARNING, category=UserWarning)
        yield


def close_threads(loader: DataLoader[Any]) -> None:
    """Stop the fetch threads of a loader built with ``worker_threads`` in this process (0 workers)
    now, so that no idle pool is left over when the next configuration forks its workers."""
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, ThreadedDataset):
        dataset.close()


def loader_dataset(pipeline: Pipeline, config: LoaderConfig) -> Any:
    """The dataset a trial loader fetches from: the user's, in worker threads when ``config`` asks
    (NOTE [worker threads]). A wrapper the user made is unwrapped: the config decides."""
    dataset = pipeline.dataset
    if isinstance(dataset, ThreadedDataset):
        dataset = dataset.dataset
    if not config.worker_threads:
        return dataset
    if pipeline.is_iterable:
        raise UsageError(
            "worker_threads needs a map-style dataset (a batch of indices to fetch concurrently); "
            f"{type(pipeline.dataset).__name__} is an IterableDataset."
        )
    return threaded_dataset(dataset, config.worker_threads)


@dataclass(eq=False)
class CyclingBatches(Sampler[list[int]]):
    """The user's epochs of index lists, one after another, for ``total`` batches.

    Each pass iterates ``epoch`` afresh (a new epoch: a RandomSampler draws a new
    order, a bucketing sampler reshuffles its buckets) and calls ``set_epoch`` on
    samplers that have it, as a training loop would. Stops if an epoch is empty.
    ``start`` index lists of the first pass are passed over: the cycle begins that far into
    the epoch (NOTE [window position] in ``throughput/measure.py``).
    """

    epoch: Iterable[list[int]]
    total: int
    sizes: deque[int] | None = field(default=None, kw_only=True)
    start: int = field(default=0, kw_only=True)

    def __iter__(self) -> Iterator[list[int]]:
        emitted = 0
        passes = 0
        skip = self.start
        while emitted < self.total:
            _set_epoch(self.epoch, passes)
            drawn = False
            for indices in self.epoch:
                drawn = True
                if skip > 0:
                    skip -= 1
                    continue
                if emitted >= self.total:
                    return
                if self.sizes is not None:
                    self.sizes.append(len(indices))
                yield indices
                emitted += 1
            if not drawn:
                return
            passes += 1

    def epoch_length(self) -> int | None:
        """Index lists in one of the user's epochs, where the sampler knows."""
        try:
            return len(self.epoch)  # type: ignore[arg-type]
        except TypeError:
            return None

    def epoch_samples(self) -> int | None:
        """Indices in one of the user's epochs, where a torch ``BatchSampler`` over a sampler that
        knows its length makes them (the last list short unless ``drop_last``); else None."""
        epoch = self.epoch
        if not isinstance(epoch, BatchSampler):
            return None
        try:
            length = len(epoch.sampler)  # type: ignore[arg-type]
        except TypeError:
            return None
        return length // epoch.batch_size * epoch.batch_size if epoch.drop_last else length

    def __len__(self) -> int:
        return self.total


def _set_epoch(batches: Any, epoch: int) -> None:
    for part in (batches, getattr(batches, "sampler", None)):
        setter = getattr(part, "set_epoch", None)
        if callable(setter):
            with contextlib.suppress(Exception):
                setter(epoch)


def epoch_batches(
    pipeline: Pipeline, batch_size: int, *, drop_last: bool | None = None, seed: int | None = None
) -> Iterable[list[int]]:
    """One epoch of index lists as the user's loader makes them.

    Their own batch sampler when it decides the batches; else ``batch_size``
    indices at a time from their sampler (or a sequential/random one; ``seed``
    orders the random one where the user gave no generator).
    """
    if pipeline.batch_sampler is not None:
        batches: Iterable[list[int]] = pipeline.batch_sampler
        return batches
    sampler = pipeline.sampler
    if sampler is None:
        if pipeline.shuffle:
            generator = pipeline.generator
            if generator is None and seed is not None:
                generator = torch.Generator().manual_seed(seed)
            sampler = RandomSampler(pipeline.dataset, generator=generator)
        else:
            sampler = SequentialSampler(pipeline.dataset)
    drop = pipeline.drop_last if drop_last is None else drop_last
    return BatchSampler(sampler, batch_size=batch_size, drop_last=drop)


def build_loader(
    pipeline: Pipeline,
    config: LoaderConfig,
    *,
    cycle: int | None = None,
    sizes: deque[int] | None = None,
    sampler: Sampler[int] | None = None,
    timeout: float = 0.0,
    worker_init_fn: Any = "pipeline",
    generator: torch.Generator | None = None,
    drop_last: bool | None = None,
    seed: int | None = None,
    inside: bool = False,
) -> DataLoader[Any]:
    """A DataLoader over the pipeline's dataset with ``config``'s knobs and the user's everything
    else.

    ``cycle=N`` walks the user's epochs for N batches (see the module docstring);
    ``sampler`` instead gives index draws of the caller's (rank sharding), batched
    by ``config.batch_size``. ``worker_init_fn="pipeline"`` keeps the user's own.
    ``timeout`` bounds every wait on a worker where the user set none (see NOTE
    [worker shutdown]); ``generator`` defaults to the user's. ``inside``: of a wrapper, the
    DataLoader it holds alone (probes that follow their own batch objects from the workers, such as
    stage timing, cannot follow them through the wrapper's own processing).
    """
    if not pipeline.kind.rebuilds_from_parts:
        # A loader-like iterable the kind builds; callers use it as a DataLoader.
        trial: DataLoader[Any] = _kind_trial(
            pipeline,
            config,
            cycle=cycle,
            sizes=sizes,
            sampler=sampler,
            timeout=timeout,
            worker_init_fn=worker_init_fn,
            drop_last=drop_last,
            inside=inside,
        )
        return trial
    kwargs = config.to_kwargs()
    kwargs.pop("batch_size", None)
    if worker_init_fn == "pipeline":
        worker_init_fn = pipeline.worker_init_fn
    if config.num_workers > 0:
        kwargs["timeout"] = pipeline.timeout or timeout
        kwargs["worker_init_fn"] = worker_init_fn
    if config.pin_memory and not torch.cuda.is_available():
        kwargs["pin_memory"] = False
    if kwargs.get("pin_memory") and pipeline.pin_memory_device:
        kwargs["pin_memory_device"] = pipeline.pin_memory_device
    generator = pipeline.generator if generator is None else generator
    dataset = loader_dataset(pipeline, config)
    if config.num_workers == 0:
        # Fetched in this process: what the fetch sets (a file opened on first use) lands on a
        # copy, not on the dataset later trials fork or pickle into their workers.
        dataset = as_built(dataset)
    with quiet_worker_warning():
        if pipeline.is_iterable:
            drop = pipeline.drop_last if drop_last is None else drop_last
            return DataLoader(
                dataset,
                batch_size=config.batch_size,
                collate_fn=pipeline.collate,
                drop_last=drop,
                generator=generator,
                **kwargs,
            )
        if sampler is not None:
            batches: Iterable[list[int]] = BatchSampler(
                sampler,
                config.batch_size,
                drop_last=pipeline.drop_last if drop_last is None else drop_last,
            )
        else:
            batches = epoch_batches(pipeline, config.batch_size, drop_last=drop_last, seed=seed)
        if cycle is not None or sizes is not None:
            batches = CyclingBatches(batches, cycle if cycle is not None else 1, sizes=sizes)
        if config.batched_fetch:
            from .batching import batched_loader  # noqa: PLC0415 - optional path

            return batched_loader(
                pipeline, config, kwargs, batches=batches, generator=generator, dataset=dataset
            )
        return DataLoader(
            dataset,
            batch_sampler=batches,
            collate_fn=pipeline.collate,
            generator=generator,
            **kwargs,
        )


def _kind_trial(
    pipeline: Pipeline,
    config: LoaderConfig,
    *,
    cycle: int | None,
    sizes: deque[int] | None,
    sampler: Sampler[int] | None,
    timeout: float,
    worker_init_fn: Any,
    drop_last: bool | None,
    inside: bool = False,
) -> Any:
    """A trial of a loader kind that is not rebuilt from parts (NOTE [loader kinds] in kinds.py).

    A copied DataLoader (a subclass, or the one inside a wrapper) keeps its own index lists, cycled
    over epochs like a rebuilt one; other kinds are built by their adapter and cycled by the caller.
    """
    from torch.utils.data import IterableDataset

    from .graphs import NodesKind
    from .kinds import CopiedLoaderKind, FactoryKind, WrappedLoaderKind, reconfigured_copy

    kind = pipeline.kind
    if isinstance(kind, FactoryKind) and isinstance(
        kind.inner, (CopiedLoaderKind, WrappedLoaderKind)
    ):
        # Trials call the factory; a probe that puts its own dataset, collate or worker_init_fn
        # inside the loader (or takes the inner loader alone) needs the adapter of what it built.
        own = kind.inner.loader if isinstance(kind.inner, CopiedLoaderKind) else kind.inner.inner
        swapped = (
            loader_dataset(pipeline, config) is not own.dataset
            or (pipeline.collate_fn is not None and pipeline.collate_fn is not own.collate_fn)
            or worker_init_fn != "pipeline"
            or sampler is not None
            or inside
        )
        if swapped:
            kind = kind.inner
    if isinstance(kind, NodesKind):
        return kind.build(config, cycle=cycle is not None)
    if not isinstance(kind, (CopiedLoaderKind, WrappedLoaderKind)):
        return kind.build(config)
    loader = kind.loader if isinstance(kind, CopiedLoaderKind) else kind.inner
    options: dict[str, Any] = {"timeout": timeout}
    if worker_init_fn != "pipeline":
        options["worker_init_fn"] = worker_init_fn
    # The pipeline's dataset and collate where they are not the loader's own: worker threads, or a
    # probe's instrumented copies (stage timing), run inside the user's own loader class.
    dataset = loader_dataset(pipeline, config)
    if dataset is not loader.dataset:
        options["dataset"] = dataset
    if pipeline.collate_fn is not None and pipeline.collate_fn is not loader.collate_fn:
        options["collate_fn"] = pipeline.collate_fn
    if not isinstance(loader.dataset, IterableDataset):
        batches: Iterable[list[int]]
        if sampler is not None:
            batches = BatchSampler(
                sampler,
                config.batch_size,
                drop_last=loader.drop_last if drop_last is None else drop_last,
            )
        elif loader.batch_size is None or loader.batch_size == config.batch_size:
            batches = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
        else:
            batches = BatchSampler(loader.sampler, config.batch_size, drop_last=loader.drop_last)
        if loader.batch_sampler is not None and (cycle is not None or sizes is not None):
            batches = CyclingBatches(
                batches,
                cycle if cycle is not None else 1,
                sizes=sizes if kind.counts_indices else None,
            )
        if loader.batch_sampler is not None:
            options["batches"] = batches
    with quiet_worker_warning():
        if inside and isinstance(kind, WrappedLoaderKind):
            return reconfigured_copy(kind.inner, config, **options)
        return kind.build(config, **options)


class EpochCycle:
    """Iterates ``loader`` epoch after epoch (a new ``iter()`` at each end) until an epoch is empty:
    steady state for loaders whose index lists stallscope cannot cycle itself."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.current = iter(loader)
        self.epochs = 0
        # The batch just returned is a new epoch's first: the wait for it (workers started again,
        # shards opened) is start-up, which a steady-state window leaves out (``restart_s``).
        self.fresh = False
        self.restart_s = 0.0

    def __iter__(self) -> EpochCycle:
        return self

    def __next__(self) -> Any:
        self.fresh = False
        try:
            return next(self.current)
        except StopIteration:
            began = time.perf_counter()
            self.epochs += 1
            self.current = iter(self.loader)
            batch = next(self.current)
            self.restart_s += time.perf_counter() - began
            self.fresh = True
            return batch

    @property
    def _workers(self) -> Any:  # read by runtime.processes.worker_pids / stop_workers
        return getattr(self.current, "_workers", None)

    def _shutdown_workers(self) -> None:
        from ..runtime.processes import shutdown_iterator

        shutdown_iterator(self.current)
