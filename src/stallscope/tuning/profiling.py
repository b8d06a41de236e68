"""The tuner's cheap profile: in-process numbers about a pipeline before any worker starts.

:func:`profile_pipeline` times single fetches (wall and CPU time per sample: CPU / wall far below
1 means the fetch waits, so more workers than cores help), the collate, batch bytes and jitter,
and whether a vectorised batch fetch exists and what it saves; :func:`profile_loader` does the
same from batches where there is no dataset to fetch from. :mod:`.tuner` reads the result into
the search (:class:`~.space.Profile`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import PipelineError, UsageError
from ..pipeline.batching import FetcherCheck, vectorised_fetcher
from ..pipeline.structure import as_built, fetch_for_collate, nbytes
from ..pipeline.threaded import own_batched_fetch
from ..target import Pipeline
from .space import Profile

# Batched fetching is only probed when a batch is this cheap in-process (in-memory data).
BATCHED_PROBE_MAX_S = 0.05


def profile_pipeline(
    pipeline: Pipeline, *, max_seconds: float = 1.0, max_items: int = 256
) -> tuple[Profile, FetcherCheck | None]:
    """Time single fetches in this process (wall and CPU), one collate, and the batched alternative.

    Fetches at least 4 items and up to two batches' worth, within ``max_seconds``
    (after one untimed fetch that absorbs lazy initialisation).
    """
    bs = pipeline.batch_size
    length = pipeline.length()
    want = max(4, min(max_items, 2 * bs))
    dataset = as_built(pipeline.dataset)  # what the fetches set stays off the user's object
    if length and not pipeline.is_iterable and own_batched_fetch(dataset):
        # torch fetches a batch at a time from it: so is it timed (per sample), and its collate
        # gets what the batch fetch returns
        fetched = max(1, min(bs, length))  # samples in the batch the collate gets
        batch_items, walls, cpus, own = _timed_batches(dataset, length, bs, want, max_seconds)
        timed = len(walls) * fetched
    else:
        items, walls, cpus, own = _timed_items(pipeline, dataset, length, want, max_seconds)
        if not items:
            raise UsageError("the dataset yielded no items to profile.")
        batch_items = items[:bs]
        fetched, timed = len(batch_items), len(walls)
    # Best of three: the first call pays allocation and thread-pool start-up, and on a busy
    # machine torch's intra-op threads can stall a single call by a whole time slice.
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        try:
            batch = pipeline.collate(batch_items)
        except Exception as exc:  # preflight normally catches this first
            raise PipelineError(f"the collate function failed on {fetched} items: {exc}") from exc
        timings.append(time.perf_counter() - start)
    collate_s = min(timings) * bs / fetched
    batch_bytes = int(nbytes(batch) * bs / fetched)
    # CPU share and jitter come from wall time less run-queue waits: being preempted on a busy
    # machine is neither waiting for data nor the source's jitter.
    own_wall = sum(own)
    ordered = sorted(own)
    median = statistics.median(ordered)
    p95 = ordered[min(len(ordered) - 1, int(math.ceil(0.95 * len(ordered))) - 1)]
    profile = Profile(
        seconds_per_sample=sum(walls) / len(walls),
        cpu_per_wall=min(1.0, sum(cpus) / own_wall) if own_wall > 0 else 1.0,
        collate_s=collate_s,
        batch_bytes=batch_bytes,
        jitter=p95 / median if median > 0 else 1.0,
        spike=ordered[-1] / median if median > 0 else 1.0,
        map_style=not pipeline.is_iterable and length is not None,
        length=length,
        items=timed,
    )
    check = None
    # Not with the user's own batch sampler: ss.make_loader, which a batched pick is emitted as,
    # batches by size.
    cheap = profile.batch_seconds(bs) <= BATCHED_PROBE_MAX_S and pipeline.batch_sampler is None
    if profile.map_style and cheap and length and length >= bs:
        check = vectorised_fetcher(dataset, pipeline.collate_fn)
        if check.fetch is not None:
            profile.batched_fetch = check.kind
            profile.batched_speedup = _batched_speedup(pipeline, dataset, check, length)
    return profile, check


_SCHEDSTAT = "/proc/thread-self/schedstat"


def profile_loader(
    pipeline: Pipeline, *, max_seconds: float = 1.0, max_batches: int = 64
) -> Profile:
    """The profile of a loader without a Dataset of ours (NOTE [loader kinds]): its batches timed
    in this process, single-process where the kind has ``num_workers`` (wall and CPU per sample)."""
    from ..pipeline.kinds import close_trial
    from ..pipeline.loaders import EpochCycle, build_loader
    from ..pipeline.structure import batch_length

    config = pipeline.baseline
    if "num_workers" in pipeline.kind.knobs:
        config = config.replace(num_workers=0)
    loader = build_loader(pipeline, config, cycle=1)
    iterator = EpochCycle(loader)
    walls: list[float] = []
    cpus: list[float] = []
    sizes: list[int] = []
    batch_bytes = 0
    try:
        batch = next(iterator)  # untimed: lazy initialisation
        batch_bytes = nbytes(batch)
        deadline = time.perf_counter() + max_seconds
        while len(walls) < max_batches and (len(walls) < 4 or time.perf_counter() < deadline):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            sizes.append(max(1, batch_length(batch)))
    except Exception as exc:
        raise PipelineError(
            f"timing {pipeline.kind.description} in this process raised {exc!r}."
        ) from exc
    finally:
        close_trial(loader, iterator)
    if not walls:
        raise UsageError(f"{pipeline.kind.description} yielded too few batches to profile.")
    per_sample = sorted(w / n for w, n in zip(walls, sizes))
    median = statistics.median(per_sample)
    p95 = per_sample[min(len(per_sample) - 1, int(math.ceil(0.95 * len(per_sample))) - 1)]
    return Profile(
        seconds_per_sample=sum(walls) / sum(sizes),
        cpu_per_wall=min(1.0, sum(cpus) / sum(walls)) if sum(walls) > 0 else 1.0,
        batch_bytes=batch_bytes,
        jitter=p95 / median if median > 0 else 1.0,
        spike=per_sample[-1] / median if median > 0 else 1.0,
        map_style=False,
        items=sum(sizes),
        samples_per_batch=sum(sizes) / len(sizes) if config.batches_itself else None,
    )


def _run_queue_seconds() -> float:
    """Seconds this thread has waited for a CPU (Linux schedstat), 0.0 where unavailable.

    On a busy machine a CPU-bound fetch spends part of its wall time queued for
    a core; that is not the fetch waiting for data, so the profile subtracts it.
    """
    try:
        with open(_SCHEDSTAT) as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _timed_batches(
    dataset: Any, length: int, bs: int, want: int, max_seconds: float
) -> tuple[Any, list[float], list[float], list[float]]:
    """For a dataset with its own ``__getitems__``: what it returns for one batch (the collate's
    input), and per batch fetched (at least 2, about ``want`` samples, within ``max_seconds``, after
    one untimed), its wall time, CPU time and wall time less run-queue waits, per sample."""
    size = max(1, min(bs, length))
    stride = max(1, length // max(1, want // size + 2))
    first: Any = None
    walls: list[float] = []
    cpus: list[float] = []
    own: list[float] = []
    deadline = time.perf_counter() + max_seconds
    n = 0
    while len(walls) < 2 or (len(walls) * size < want and time.perf_counter() < deadline):
        start_at = (n * stride) % length
        indices = [(start_at + k) % length for k in range(size)]
        q0, w0, c0 = _run_queue_seconds(), time.perf_counter(), time.process_time()
        try:
            batch = fetch_for_collate(dataset, indices)
        except Exception as exc:
            raise PipelineError(
                f"fetching indices {indices[0]}..{indices[-1]} with the dataset's own "
                f"__getitems__ raised {type(exc).__name__}: {exc}"
            ) from exc
        w1, c1, q1 = time.perf_counter(), time.process_time(), _run_queue_seconds()
        if n == 0:
            first = batch  # untimed: lazy initialisation
        else:
            walls.append((w1 - w0) / size)
            cpus.append((c1 - c0) / size)
            own.append(max(1e-9, (w1 - w0) - (q1 - q0)) / size)
        n += 1
    return first, walls, cpus, own


def _timed_items(
    pipeline: Pipeline, dataset: Any, length: int | None, want: int, max_seconds: float
) -> tuple[list[Any], list[float], list[float], list[float]]:
    """Items, their wall times, CPU times, and wall times less run-queue waits."""
    items: list[Any] = []
    walls: list[float] = []
    cpus: list[float] = []
    own: list[float] = []
    deadline = time.perf_counter() + max_seconds
    if pipeline.is_iterable or length is None:
        iterator = iter(dataset)
        fetch: Callable[[int], Any] = lambda _i: next(iterator)  # noqa: E731
        indices: Sequence[int] = range(want + 1)
    else:
        stride = max(1, length // (want + 1))
        indices = [(i * stride) % length for i in range(want + 1)]
        fetch = dataset.__getitem__
    for n, index in enumerate(indices):
        q0, w0, c0 = _run_queue_seconds(), time.perf_counter(), time.process_time()
        try:
            item = fetch(index)
        except StopIteration:
            break
        except Exception as exc:
            raise PipelineError(
                f"fetching item {index} raised {type(exc).__name__}: {exc}"
            ) from exc
        w1, c1, q1 = time.perf_counter(), time.process_time(), _run_queue_seconds()
        if n > 0:  # the first fetch pays lazy initialisation (file handles, caches)
            items.append(item)
            walls.append(w1 - w0)
            cpus.append(c1 - c0)
            own.append(max(1e-9, (w1 - w0) - (q1 - q0)))
        if len(walls) >= 4 and w1 > deadline:
            break
    return items, walls, cpus, own


def _batched_speedup(
    pipeline: Pipeline, dataset: Any, check: FetcherCheck, length: int
) -> float | None:
    """Per-item fetch + collate time over vectorised fetch time, for one batch, in-process (best of
    3)."""
    assert check.fetch is not None
    bs = pipeline.batch_size
    indices = list(range(min(bs, length)))
    per_item, batched = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        pipeline.collate([dataset[i] for i in indices])
        t1 = time.perf_counter()
        check.fetch(dataset, indices)
        t2 = time.perf_counter()
        per_item.append(t1 - t0)
        batched.append(t2 - t1)
    return min(per_item) / min(batched) if min(batched) > 0 else None
