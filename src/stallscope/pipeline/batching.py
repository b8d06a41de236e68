"""Batched fetching: one call per batch instead of one per item (SPEC §8).

For in-memory data the per-item path — ``batch_size`` calls to
``__getitem__``, each building small tensors, then ``default_collate``
stacking them — costs far more than the data movement itself. A vectorised
fetch indexes the whole batch at once (``tensor[indices]``), which is what
``Dataset.__getitems__`` is for.

:func:`vectorised_fetcher` finds such a fetch for a dataset, and only offers
one after checking, on real indices, that it returns exactly what the
per-item path plus the collate would (the same values, dtypes and
structure). Kinds:

* ``getitems`` — the dataset defines ``__getitems__`` (torch already uses it;
  nothing to gain, reported so the tuner does not try).
* ``tensor-index`` — a ``TensorDataset`` (or a ``Subset`` of one): index every
  tensor with the batch's indices.
* ``array-index`` — the dataset's ``__getitem__`` accepts an index array
  (common for NumPy- or tensor-backed datasets written as ``self.x[i]``).

:func:`batched_loader` builds the DataLoader: a :class:`BatchedDataset`
receives a list of indices from a ``BatchSampler`` (``batch_size=None`` turns
torch's auto-collation off), so each worker — or the main process — makes a
batch in one call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    Subset,
    TensorDataset,
)
from torch.utils.data._utils.collate import default_collate, default_convert

from ..config import LoaderConfig
from .structure import as_built, fetch_for_collate
from .threaded import equal_arrays

# Where batched_loader caches the validated fetcher on a Pipeline.
_FETCHER_KEY = "_stallscope_batch_fetcher"


# -- fetchers (module-level classes: they travel to spawned workers by pickle) -----


class TensorIndexFetch:
    """``TensorDataset``: index each tensor with the batch's indices (a list, as default_collate
    returns for tuples)."""

    kind = "tensor-index"

    def __call__(self, dataset: Any, indices: Sequence[int]) -> Any:
        index = torch.as_tensor(indices, dtype=torch.long)
        # index_select, not tensor[index]: advanced indexing goes through the intra-op thread pool
        # even for a small batch, and on a busy machine its barrier can cost milliseconds.
        return [tensor.index_select(0, index) for tensor in dataset.tensors]


class ArrayIndexFetch:
    """``dataset[np.array(indices)]``, converted to tensors as default_collate would."""

    kind = "array-index"

    def __call__(self, dataset: Any, indices: Sequence[int]) -> Any:
        # torch leaves default_convert and default_collate unannotated.
        return default_convert(  # type: ignore[no-untyped-call]
            dataset[np.asarray(indices, dtype=np.int64)]
        )


class SubsetFetch:
    """A ``Subset``: map the indices, then fetch from the inner dataset."""

    def __init__(self, inner: Callable[[Any, Sequence[int]], Any]) -> None:
        self.inner = inner
        self.kind = f"subset/{getattr(inner, 'kind', 'fetch')}"

    def __call__(self, dataset: Any, indices: Sequence[int]) -> Any:
        mapped = [dataset.indices[i] for i in indices]
        return self.inner(dataset.dataset, mapped)


class ItemsFetch:
    """The per-item path in one call (no vectorisation): fetch each item, then collate."""

    kind = "items"

    def __init__(self, collate: Callable[[list[Any]], Any] | None = None) -> None:
        self.collate = collate

    def __call__(self, dataset: Any, indices: Sequence[int]) -> Any:
        return (self.collate or default_collate)(fetch_for_collate(dataset, indices))


class BatchedDataset(Dataset[Any]):
    """A map-style view whose items are whole batches: ``view[list_of_indices] -> batch``."""

    def __init__(self, dataset: Any, fetch: Callable[[Any, Sequence[int]], Any]) -> None:
        self.dataset = dataset
        self.fetch = fetch

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, indices: Sequence[int]) -> Any:
        return self.fetch(self.dataset, indices)


def as_is(batch: Any) -> Any:
    """The collate of a batched loader: the fetch already made the batch."""
    return batch


# -- finding a fetch -----------------------------------------------------------------------


@dataclass
class FetcherCheck:
    """What :func:`vectorised_fetcher` found."""

    fetch: Callable[[Any, Sequence[int]], Any] | None
    kind: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason}


def same_batch(a: Any, b: Any) -> bool:
    """Structural equality of two batches (tensor values and dtypes; list and tuple
    interchangeable)."""
    arrays = equal_arrays(a, b)
    if arrays is not None:
        return arrays
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_batch(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_batch(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:
        return False


def _candidate(dataset: Any) -> Callable[[Any, Sequence[int]], Any] | None:
    if isinstance(dataset, TensorDataset):
        return TensorIndexFetch()
    if isinstance(dataset, Subset):
        inner = _candidate(dataset.dataset)
        return SubsetFetch(inner) if inner is not None else None
    if hasattr(dataset, "__getitem__") and not isinstance(
        dataset, torch.utils.data.IterableDataset
    ):
        return ArrayIndexFetch()
    return None


def vectorised_fetcher(
    dataset: Any,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    *,
    probe_indices: Sequence[int] | None = None,
) -> FetcherCheck:
    """A validated vectorised fetch for ``dataset``, or why there is none.

    The candidate must return the same batch as the per-item path on
    ``probe_indices`` (default: up to 8 indices spread over the dataset).
    A custom ``collate_fn`` rules vectorising out: it expects items.
    """
    # torch's Subset defines __getitems__ only to forward per item: look through it.
    if getattr(type(dataset), "__getitems__", None) is not None and not isinstance(dataset, Subset):
        return FetcherCheck(
            None, "getitems", "the dataset defines __getitems__, which torch already uses per batch"
        )
    if collate_fn is not None and collate_fn is not default_collate:
        return FetcherCheck(None, None, "a custom collate_fn expects a list of items")
    try:
        length = len(dataset)
    except TypeError:
        return FetcherCheck(None, None, "the dataset has no length (iterable)")
    if length < 2:
        return FetcherCheck(None, None, "the dataset has fewer than two items")
    fetch = _candidate(dataset)
    if fetch is None:
        return FetcherCheck(None, None, "no vectorised index path for this dataset type")
    indices = list(probe_indices) if probe_indices is not None else _spread(length, 8)
    probe = as_built(dataset)  # fetched in this process: what the fetches set stays off it
    try:
        expected = default_collate([probe[i] for i in indices])  # type: ignore[no-untyped-call]
        got = fetch(probe, indices)
        again = default_collate([probe[i] for i in indices])  # type: ignore[no-untyped-call]
    except Exception as exc:  # the dataset does not take an index array: not vectorisable
        return FetcherCheck(None, None, f"indexing with an array failed ({type(exc).__name__})")
    if not same_batch(expected, again):
        return FetcherCheck(
            None,
            None,
            "items differ between two fetches (random transforms), so a batch cannot be checked",
        )
    if not same_batch(expected, got):
        return FetcherCheck(
            None, None, "indexing with an array returns something other than the collated items"
        )
    kind = getattr(fetch, "kind", "vectorised")
    return FetcherCheck(
        fetch,
        kind,
        f"{kind}: one indexing call per batch returns the same batch as per-item fetching",
    )


def _spread(length: int, count: int) -> list[int]:
    count = min(count, length)
    step = max(1, length // count)
    # An unordered, non-contiguous probe: catches datasets that only handle slices.
    picks = [(i * step + i) % length for i in range(count)]
    return list(dict.fromkeys(reversed(picks)))


# -- the loader ------------------------------------------------------------------------------


def _fetcher_for(pipeline: Any) -> Callable[[Any, Sequence[int]], Any]:
    extras = getattr(pipeline, "extras", None)
    if isinstance(extras, dict) and _FETCHER_KEY in extras:
        fetcher: Callable[[Any, Sequence[int]], Any] = extras[_FETCHER_KEY]
        return fetcher
    check = vectorised_fetcher(pipeline.dataset, pipeline.collate_fn)
    fetch = check.fetch or ItemsFetch(pipeline.collate_fn)
    if isinstance(extras, dict):
        extras[_FETCHER_KEY] = fetch
    return fetch


def batched_loader(
    pipeline: Any,
    config: LoaderConfig,
    kwargs: dict[str, Any],
    *,
    batches: Iterable[list[int]] | None = None,
    sampler: Sampler[int] | None = None,
    drop_last: bool = False,
    generator: torch.Generator | None = None,
    dataset: Any = None,
) -> DataLoader[Any]:
    """A DataLoader whose every fetch returns a whole batch (``config.batched_fetch``).

    ``kwargs`` are the DataLoader arguments built from ``config``
    (``to_kwargs()`` plus timeout/worker_init_fn). ``batches`` yields the index
    lists (the user's batching); without it, ``sampler``'s indices are grouped
    into batches of ``config.batch_size``. Without a validated vectorised fetch,
    falls back to fetching the items in one call. ``dataset``: what the batches are
    fetched from, default the pipeline's (a trial in this process passes a copy of it).
    """
    if pipeline.is_iterable:
        raise ValueError(
            "batched fetching needs a map-style dataset (indices), not an iterable one"
        )
    fetch = _fetcher_for(pipeline)
    if batches is None:
        base = sampler
        if base is None:
            base = (
                RandomSampler(pipeline.dataset, generator=generator)
                if pipeline.shuffle
                else SequentialSampler(pipeline.dataset)
            )
        batches = BatchSampler(base, batch_size=config.batch_size, drop_last=drop_last)
    options = dict(kwargs)
    options.pop("batch_size", None)
    options.pop("shuffle", None)
    return DataLoader(
        BatchedDataset(pipeline.dataset if dataset is None else dataset, fetch),
        batch_size=None,
        sampler=batches,
        collate_fn=as_is,
        generator=generator,
        **options,
    )
