"""Building DataLoaders from a :class:`Pipeline` and a :class:`LoaderConfig`.

Probes measure steady state, so they feed the loader a :class:`CyclingSampler`
that walks the dataset as many times as needed: no epoch boundary (and its
worker restart) lands inside a measurement window. Epoch start-up is measured
separately.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler

from ..config import LoaderConfig
from ..errors import UsageError
from ..target import Pipeline
from .threaded import ThreadedDataset, threaded_dataset


class CyclingSampler(Sampler[int]):
    """Indices over ``length`` items, repeated for ``total`` draws.

    Shuffles each pass (seeded) when ``shuffle`` is true, like a RandomSampler
    over many epochs.
    """

    def __init__(self, length: int, total: int, *, shuffle: bool = False, seed: int = 0) -> None:
        if length <= 0:
            raise ValueError("length must be positive")
        self.length = length
        self.total = total
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        emitted = 0
        epoch = 0
        while emitted < self.total:
            if self.shuffle:
                gen = torch.Generator().manual_seed(self.seed + epoch)
                order = torch.randperm(self.length, generator=gen).tolist()
            else:
                order = range(self.length)
            for index in order:
                if emitted >= self.total:
                    return
                yield index
                emitted += 1
            epoch += 1

    def __len__(self) -> int:
        return self.total


@contextlib.contextmanager
def quiet_worker_warning() -> Iterator[None]:
    """Silence torch's "suggested max number of worker" warning: more workers than
    cores is a configuration we measure on purpose (latency-bound sources need it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        yield


def close_threads(loader: DataLoader) -> None:
    """Stop the fetch threads of a loader built with ``worker_threads`` in this process (0 workers)
    now, so that no idle pool is left over when the next configuration forks its workers."""
    if isinstance(loader.dataset, ThreadedDataset):
        loader.dataset.close()


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


def build_loader(
    pipeline: Pipeline,
    config: LoaderConfig,
    *,
    sampler: Sampler[int] | None = None,
    timeout: float = 0.0,
    worker_init_fn: Any = "pipeline",
    generator: torch.Generator | None = None,
    drop_last: bool | None = None,
) -> DataLoader:
    """A DataLoader over the pipeline's dataset with ``config``'s knobs.

    ``worker_init_fn="pipeline"`` keeps the user's own (from their DataLoader).
    ``timeout`` bounds every wait on a worker (see NOTE [worker shutdown]).
    """
    kwargs = config.to_kwargs()
    if worker_init_fn == "pipeline":
        worker_init_fn = pipeline.worker_init_fn
    if config.num_workers > 0:
        kwargs["timeout"] = timeout
        kwargs["worker_init_fn"] = worker_init_fn
    if config.pin_memory and not torch.cuda.is_available():
        kwargs["pin_memory"] = False
    drop = pipeline.drop_last if drop_last is None else drop_last
    with quiet_worker_warning():
        return _construct(pipeline, config, kwargs, sampler=sampler, drop=drop, generator=generator)


def _construct(
    pipeline: Pipeline,
    config: LoaderConfig,
    kwargs: dict[str, Any],
    *,
    sampler: Sampler[int] | None,
    drop: bool,
    generator: torch.Generator | None,
) -> DataLoader:
    dataset = loader_dataset(pipeline, config)
    if pipeline.is_iterable:
        return DataLoader(dataset, collate_fn=pipeline.collate, drop_last=drop, generator=generator, **kwargs)
    if config.batched_fetch:
        from .batching import batched_loader  # noqa: PLC0415 - optional path

        return batched_loader(pipeline, config, kwargs, sampler=sampler, drop_last=drop, generator=generator)
    if sampler is None and pipeline.shuffle:
        kwargs["shuffle"] = True
    return DataLoader(
        dataset,
        sampler=sampler,
        collate_fn=pipeline.collate,
        drop_last=drop,
        generator=generator,
        **kwargs,
    )
