"""Probe: do the workers of an ``IterableDataset`` yield the same samples?

NOTE [unsharded streams]
A map-style dataset is split between workers by the sampler; an iterable one
is not: DataLoader hands every worker a copy of the dataset and calls
``iter()`` on each, so a stream that ignores
``torch.utils.data.get_worker_info()`` is replayed by every worker. Training
then sees each sample ``num_workers`` times per epoch, and a benchmark counts
the copies as throughput.

The probe runs the stream in real DataLoader workers (the user's
``worker_init_fn`` included, since sharding is often set up there), hashes a
bounded prefix of each worker's stream by content (``rng.sample_digest``:
tensors, arrays, dicts and tuples by value) and compares the workers' hashes.
The verdict (:func:`duplication_verdict`) is pure, so ``check``'s rule, ``bench``
and ``tune`` read the same numbers the same way.

Libraries that split shards themselves are probed the same way, through the dataset their
loader holds: webdataset's ``WebDataset(urls)`` without ``workersplitter=split_by_worker``
(``WebLoader`` is taken apart as a wrapper, NOTE [loader kinds]) yields every shard in every
worker, so each worker's batches (built in the workers by ``.batched()``) hash alike; with the
splitter they do not. Hugging Face's ``IterableDataset`` hands each worker its own shards and
stops the workers it has none for (``to_iterable_dataset(num_shards=1)`` with 2 workers: worker
1 yields nothing), and litdata's ``StreamingDataset`` splits its chunks by worker itself; neither
is flagged.

A flag carries its evidence: how many hashed samples another worker also yielded and, for the
first few, the sample's key where it has one (webdataset's ``__key__``, an ``id`` or ``index``
field) with each worker's position of it in its stream. A stream whose workers did not all
yield (it ended with some of them idle) is not duplicated: no sample came from two workers, and
the record says which workers were idle.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ..runtime.processes import (
    describe_worker_death,
    is_worker_death,
    shutdown_iterator,
    stop_workers,
)
from .findings import ERROR, Finding
from .rng import sample_digest
from .util import describe_worker_exception

PREFIX_ITEMS = 256  # hashed per worker at most
MIN_ITEMS = 4  # per worker, to say anything at all
# Duplicated: at least this share of the hashed samples also came from another worker ...
MIN_DUPLICATE_FRACTION = 0.2
# ... and each worker's own stream is mostly distinct (data that repeats within a worker,
# like class labels, would also repeat across workers however well the stream is sharded).
MAX_REPEAT_FRACTION = 0.5


EXAMPLES = 3  # duplicated samples named in the evidence
# Fields that name a sample, looked up in a Mapping sample (or batch) in this order.
KEY_FIELDS = ("__key__", "key", "id", "uid", "sample_id", "idx", "index")


def sample_key(item: Any) -> str | None:
    """The key a sample carries (webdataset's ``__key__``, an ``id`` or ``index`` field; the first
    of a batch's), or None."""
    if not isinstance(item, Mapping):
        return None
    for name in KEY_FIELDS:
        if name not in item:
            continue
        value = item[name]
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        elif hasattr(value, "ndim") and hasattr(value, "tolist"):  # a tensor or an array
            value = value.reshape(-1)[0].tolist() if value.ndim and len(value) else value.tolist()
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)[:120]
    return None


class DigestItems:
    """Collate for the probe: runs in the worker, returns the worker id, the items' hashes and
    their keys."""

    def __call__(self, items: Any) -> tuple[int, list[str], list[str | None]]:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        return (
            info.id if info is not None else -1,
            [sample_digest(item) for item in items],
            [sample_key(item) for item in items],
        )


def probe_sharding(
    pipeline: Any,
    *,
    workers: int,
    start_method: str | None,
    deadline: float,
    timeout: float,
    startup: float = 0.0,
    prefix: int = PREFIX_ITEMS,
    seed: int = 0,
) -> dict[str, Any]:
    """Hash up to ``prefix`` items of each worker's stream, stopping at ``deadline``.

    Returns the raw record: ``digests`` per worker id (in stream order), how the
    run ended (``ended``: "prefix" | "exhausted" | "deadline"), and ``error`` when the
    stream failed in a worker. ``timeout`` bounds one item and ``startup`` a worker's
    start; every wait is also bounded by the deadline.
    """
    import torch
    from torch.utils.data import DataLoader

    started = time.perf_counter()
    workers = max(2, int(workers))
    record: dict[str, Any] = {
        "workers": workers,
        "start_method": start_method,
        "prefix": prefix,
        "digests": {},
        "ended": None,
        "error": None,
    }
    chunk = max(1, min(16, prefix // 8))
    left = deadline - time.monotonic()
    loader = DataLoader(
        pipeline.dataset,
        batch_size=chunk,
        num_workers=workers,
        collate_fn=DigestItems(),
        worker_init_fn=pipeline.worker_init_fn,
        multiprocessing_context=start_method,
        timeout=max(1.0, min(startup + timeout * chunk, left)),
        generator=torch.Generator().manual_seed(seed),
    )
    digests: dict[int, list[str]] = {}
    keys: dict[int, list[str | None]] = {}
    iterator = None
    try:
        iterator = iter(loader)
        while True:
            if time.monotonic() > deadline:
                record["ended"] = "deadline"
                break
            try:
                worker, hashed, named = next(iterator)
            except StopIteration:
                record["ended"] = "exhausted"
                break
            digests.setdefault(int(worker), []).extend(hashed)
            keys.setdefault(int(worker), []).extend(named)
            enough = len(digests) >= workers and all(len(d) >= prefix for d in digests.values())
            # A worker whose shard ran out stops contributing; do not wait for it forever.
            if enough or sum(len(d) for d in digests.values()) >= 2 * prefix * workers:
                record["ended"] = "prefix"
                break
    except Exception as exc:  # the user's stream failed in a worker: record it, do not crash
        dead = stop_workers(iterator, exc) if iterator is not None else []  # NOTE [worker death]
        if dead or is_worker_death(exc):
            record["error"] = describe_worker_death(dead, " while reading the stream", exc)
        else:
            record["error"] = describe_worker_exception(exc)
    finally:
        if iterator is not None:
            shutdown_iterator(iterator)
    record["digests"] = {str(w): d[:prefix] for w, d in sorted(digests.items())}
    record["keys"] = {str(w): k[:prefix] for w, k in sorted(keys.items()) if any(k[:prefix])}
    record["seconds"] = round(time.perf_counter() - started, 3)
    return record


def duplication_verdict(record: dict[str, Any]) -> dict[str, Any]:
    """What the hashes say (pure).

    ``duplicated`` is True when at least ``MIN_DUPLICATE_FRACTION`` of the hashed
    samples were also yielded by another worker while each worker's own stream is
    mostly distinct; False when they were not, or when the stream ended with a single
    worker having yielded samples (the others idle: none came from two workers); None
    when it cannot be told (fewer than two workers yielded ``MIN_ITEMS`` items before
    the probe stopped, or the data repeats within a worker). ``examples``: the first
    duplicated samples, with their key where they carry one and each worker's position.
    """
    streams = {w: list(d) for w, d in (record.get("digests") or {}).items()}
    per_worker = {w: len(d) for w, d in streams.items()}
    out: dict[str, Any] = {
        "duplicated": None,
        "workers_seen": len(streams),
        "items_per_worker": per_worker,
        "samples_compared": sum(per_worker.values()),
        "duplicated_samples": 0,
        "distinct_duplicates": 0,
        "duplicate_fraction": 0.0,
        "repeat_fraction_within_worker": None,
        "same_order": False,
        "idle_workers": None,
        "examples": [],
        "reason": None,
    }
    started = int(record.get("workers") or 0)
    if record.get("ended") == "exhausted" and started > len(streams):
        out["idle_workers"] = started - len(streams)
    if record.get("error"):
        out["reason"] = f"the stream failed in a worker: {record['error']}"
        return out
    usable = {w: d for w, d in streams.items() if len(d) >= MIN_ITEMS}
    if len(streams) == 1 and len(usable) == 1 and out["idle_workers"]:
        # The stream ended and every sample came from one worker: nothing was read twice.
        out["duplicated"] = False
        out["reason"] = (
            f"only one of the {started} workers yielded samples; the stream ended with "
            f"{out['idle_workers']} idle"
        )
        return out
    if len(usable) < 2:
        out["reason"] = (
            f"fewer than two workers yielded {MIN_ITEMS} items "
            f"({', '.join(f'worker {w}: {n}' for w, n in per_worker.items()) or 'none did'})"
        )
        return out
    owners: dict[str, set[str]] = {}
    for worker, digests in usable.items():
        for digest in digests:
            owners.setdefault(digest, set()).add(worker)
    shared = {d for d, seen in owners.items() if len(seen) > 1}
    total = sum(len(d) for d in usable.values())
    duplicated = sum(1 for d in usable.values() for digest in d if digest in shared)
    repeats = [1.0 - len(set(d)) / len(d) for d in usable.values()]
    repeat = sum(repeats) / len(repeats)
    first, *others = usable.values()
    names = record.get("keys") or {}
    examples: list[dict[str, Any]] = []
    for digest in dict.fromkeys(d for stream in usable.values() for d in stream):
        if len(examples) >= EXAMPLES:
            break
        if digest not in shared:
            continue
        positions = {w: stream.index(digest) for w, stream in usable.items() if digest in stream}
        worker, at = next(iter(positions.items()))
        key = (names.get(worker) or [])[at] if at < len(names.get(worker) or []) else None
        examples.append({"key": key, "digest": digest, "positions": positions})
    out.update(
        examples=examples,
        duplicated_samples=duplicated,
        distinct_duplicates=len(shared),
        samples_compared=total,
        duplicate_fraction=round(duplicated / total, 4),
        repeat_fraction_within_worker=round(repeat, 4),
        same_order=all(
            o[: min(len(o), len(first))] == first[: min(len(o), len(first))] for o in others
        ),
    )
    if repeat > MAX_REPEAT_FRACTION:
        out["reason"] = (
            f"{repeat:.0%} of each worker's own samples repeat, so equal samples "
            "across workers prove nothing"
        )
        return out
    out["duplicated"] = duplicated / total >= MIN_DUPLICATE_FRACTION
    return out


def _forks(method: str | None) -> bool:
    """Whether workers started with ``method`` (None: the platform's default) are forked."""
    import multiprocessing
    import sys

    if method is not None:
        return method == "fork"
    current = multiprocessing.get_start_method(allow_none=True)
    if current is not None:
        return current == "fork"
    return sys.platform.startswith("linux") and sys.version_info < (3, 14)


def stream_duplicates(
    pipeline: Any,
    *,
    workers: int = 2,
    start_method: str | None = None,
    seconds: float = 20.0,
    timeout: float = 5.0,
    prefix: int = 64,
) -> dict[str, Any]:
    """Probe and verdict in one call, for ``bench`` and ``tune``: ``{"duplicated": ..., ...}``.

    Only iterable datasets can duplicate; map-style ones get ``duplicated: False``
    without starting a worker.
    """
    if not pipeline.is_iterable:
        return {"duplicated": False, "reason": "map-style dataset: the sampler splits it"}
    method = start_method or pipeline.baseline.multiprocessing_context
    record = probe_sharding(
        pipeline,
        workers=workers,
        start_method=method,
        deadline=time.monotonic() + seconds,
        timeout=timeout,
        startup=5.0 if _forks(method) else 30.0,  # spawn re-imports torch in every worker
        prefix=prefix,
    )
    verdict = duplication_verdict(record)
    verdict["workers"] = record["workers"]
    verdict["seconds"] = record["seconds"]
    return verdict


def replayed_stream(pipeline: Any, *, seconds: float) -> str | None:
    """Why ``tune`` must not give this stream workers, or None when it may.

    Watched in real workers; whether ``__iter__``'s source consults ``get_worker_info()``
    decides only when the samples cannot tell.
    """
    from ..pipeline.inspection import shards_by_worker

    seen = stream_duplicates(pipeline, seconds=seconds)
    if seen["duplicated"]:
        evidence = (
            f"{seen['duplicated_samples']} of {seen['samples_compared']} samples hashed "
            f"from {seen['workers']} workers were duplicates"
        )
    elif seen["duplicated"] is None and not shards_by_worker(pipeline.dataset):
        evidence = (
            "its __iter__ does not consult get_worker_info() and the samples could not "
            f"tell: {seen['reason']}"
        )
    else:
        return None
    return (
        f"the IterableDataset is not sharded by worker ({evidence}): each worker would "
        "replay the whole stream and "
        "samples/s would count the copies, so only num_workers=0 was measured (shard by "
        "torch.utils.data.get_worker_info() to use workers)"
    )


# -- the rule (in rules.DEFAULT_RULES) ------------------------------------------------------------

SHARD_EXAMPLE = (
    "    info = torch.utils.data.get_worker_info()\n"
    "    workers, me = (info.num_workers, info.id) if info else (1, 0)\n"
    "    yield from itertools.islice(self.stream(), me, None, workers)"
)


def detect_iterable_duplicates(probes: dict[str, Any]) -> list[Finding]:
    sharding = probes.get("sharding")
    if not sharding or sharding.get("error"):
        return []
    verdict = duplication_verdict(sharding)
    if not verdict["duplicated"]:
        return []
    workers = verdict["workers_seen"]
    counts = ", ".join(f"worker {w}: {n}" for w, n in verdict["items_per_worker"].items())
    every = verdict["duplicate_fraction"] >= 0.999
    head = (
        "Every worker yields the same samples"
        if every
        else "Workers yield some of the same samples"
    )
    order = ", in the same order" if verdict["same_order"] else ""
    example = ""
    if verdict["examples"]:
        keyed = [e for e in verdict["examples"] if e["key"] is not None]
        first = (keyed or verdict["examples"])[0]
        where = ", ".join(f"worker {w} item {at}" for w, at in first["positions"].items())
        what = (
            f"sample {first['key']!r}"
            if first["key"] is not None
            else f"identical content {first['digest']}"
        )
        example = f" (e.g. {what}: {where})"
    message = (
        f"{head}: {verdict['duplicated_samples']:,} of the "
        f"{verdict['samples_compared']:,} samples hashed from {workers} workers "
        f"({counts}) were also yielded by another worker{order}{example}; the IterableDataset "
        "does not shard its stream by "
        "torch.utils.data.get_worker_info(), so with num_workers=N training sees each "
        "of these samples N times."
    )
    evidence = {
        "duplicated_samples": verdict["duplicated_samples"],
        "distinct_duplicates": verdict["distinct_duplicates"],
        "samples_compared": verdict["samples_compared"],
        "duplicate_fraction": verdict["duplicate_fraction"],
        "items_per_worker": verdict["items_per_worker"],
        "same_order": verdict["same_order"],
        # the first duplicated samples: their key where they carry one, content hash, and the
        # position of each in each worker's stream
        "examples": verdict["examples"],
        "workers": sharding.get("workers"),
        "start_method": sharding.get("start_method"),
        "prefix_items": sharding.get("prefix"),
    }
    fix = (
        "Give each worker its own part of the stream in __iter__ (by item stride, or "
        "by file/shard), e.g.:\n"
        f"{SHARD_EXAMPLE}\n"
        "or split the files: self.files[info.id::info.num_workers]. Until then keep num_workers=0."
    )
    return [Finding("iterable-duplicates", ERROR, message, evidence, fix)]
