"""Pre-flight: one batch fetched and collated in this process before any worker starts, so that an
empty dataset, a batch size larger than the dataset, a ``__getitem__`` that raises or items the
collate cannot batch are one sentence (``UsageError``/``PipelineError``), not a worker's
traceback."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import PipelineError, UsageError, describe_exception
from .kinds import close_trial
from .structure import as_built, batch_length, describe_structure, fetch_for_collate, nbytes
from .threaded import own_batched_fetch


@dataclass
class Preflight:
    """What one in-process fetch and collate of a first batch revealed."""

    length: int | None
    item_structure: str
    batch_structure: str
    batch_bytes: int
    seconds_per_item: float


def preflight(pipeline: Any, *, items: int | None = None) -> Preflight:
    """Fetch and collate one batch in this process, turning failures into one sentence.

    Catches, before any worker starts: an empty dataset, a batch size larger
    than the dataset, ``__getitem__`` raising, and items the collate cannot batch.
    """
    import time

    if not pipeline.has_dataset:
        return _loader_preflight(pipeline)
    if not pipeline.kind.rebuilds_from_parts:
        # The user's own loader (a copy, their factory's product, their wrapper) makes the batches:
        # its first batch is the reference, not one collated here from the dataset's items, which
        # may already be batches (NOTE [loader kinds]).
        pre = _loader_preflight(pipeline)
        pre.length = pipeline.length()
        return pre
    length = pipeline.length()
    bs = pipeline.batch_size
    if length is not None:
        if length == 0:
            raise UsageError("the dataset is empty (len(dataset) == 0): there is nothing to load.")
        if bs > length:
            raise UsageError(
                f"batch size {bs} is larger than the dataset ({length} items); pass "
                f"--batch-size {length} or smaller."
            )
    want = min(bs, items or bs)
    samples: list[Any] = []
    dataset = as_built(pipeline.dataset)
    fetched: Any = samples  # what the collate gets, as a DataLoader hands it over
    count = want  # the samples fetched
    start = time.perf_counter()
    if pipeline.is_iterable or length is None:
        try:
            for sample in dataset:
                samples.append(sample)
                if len(samples) >= want:
                    break
        except Exception as exc:
            raise PipelineError(f"iterating the dataset raised {describe_exception(exc)}.") from exc
        if not samples:
            raise UsageError("the dataset is empty: iterating it yielded nothing.")
        count = len(samples)
    elif own_batched_fetch(dataset):
        # torch fetches a batch with the dataset's own __getitems__, never item by item, and
        # what it returns need not be a list (fetch_for_collate).
        try:
            fetched = fetch_for_collate(dataset, range(want))
        except Exception as exc:
            raise PipelineError(
                f"dataset.__getitems__ on the first {want} indices raised "
                f"{describe_exception(exc)}."
            ) from exc
        # a list of items as torch documents it, else the batch it made itself (a dict of
        # batched tensors, a TensorDict), described as it is
        samples.append(fetched[0] if isinstance(fetched, list) and fetched else fetched)
    else:
        for index in range(want):
            try:
                samples.append(dataset[index])
            except Exception as exc:
                raise PipelineError(f"dataset[{index}] raised {describe_exception(exc)}.") from exc
    per_item = (time.perf_counter() - start) / count
    try:
        batch = pipeline.collate(fetched)
    except Exception as exc:
        kinds = sorted({describe_structure(s) for s in samples})
        shown = "; ".join(kinds[:3]) + ("; ..." if len(kinds) > 3 else "")
        raise PipelineError(
            "the collate function cannot batch these items "
            f"({describe_exception(exc, 120)}); items look like: {shown}. "
            "Pad them to one shape or pass --collate MODULE:FN."
        ) from exc
    return Preflight(
        length=length,
        item_structure=describe_structure(samples[0]),
        batch_structure=describe_structure(batch),
        batch_bytes=nbytes(batch) * max(1, bs // count),
        seconds_per_item=per_item,
    )


def _loader_preflight(pipeline: Any) -> Preflight:
    """A loader without a Dataset of ours to fetch from: take its first batch as it is built."""
    import time

    loader = iterator = None
    start = time.perf_counter()
    try:
        loader = pipeline.kind.build(pipeline.baseline)
        iterator = iter(loader)
        batch = next(iterator)
    except StopIteration:
        raise UsageError(
            f"{pipeline.kind.description} yielded no batch: there is nothing to measure."
        ) from None
    except UsageError:
        raise
    except Exception as exc:
        raise PipelineError(
            f"taking a first batch from {pipeline.kind.description} raised "
            f"{describe_exception(exc)}."
        ) from exc
    finally:
        close_trial(loader, iterator)
    samples = max(1, batch_length(batch))
    structure = describe_structure(batch)
    return Preflight(
        length=None,
        item_structure=structure,
        batch_structure=structure,
        batch_bytes=nbytes(batch),
        seconds_per_item=(time.perf_counter() - start) / samples,
    )
