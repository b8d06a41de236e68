"""Analysis of the memory probe: memory-growth (with its cause) and copy-on-write. Pure functions.

memory-growth reads the points each worker took of its own Python heap
(``tracemalloc``, NumPy included) and RSS, and of the memory of the processes
it started; native memory is RSS minus the heap, plus those processes' (a
helper a dataset launches is the worker's: NOTE [the whole process tree] in
runtime/resources.py). The probe makes several passes over the same indices, so growth that
stops after the first pass shows as a plateau. The cause decides the message:

- the Python heap keeps growing: something on the dataset keeps every sample;
  the container that grew is named, with the allocation sites;
- native memory grows during the first pass and then stays flat: a library
  cache (per input shape, per file...): a cost to budget for, not a leak;
- native memory keeps growing: a native leak.

A stream that ends is iterated again by the probe (NOTE [stream epochs] in
``memory_worker.py``). Memory that returns to its level at the end of every
epoch (a shuffle buffer filled and freed per epoch) is not growth: a worker
that saw at least two epoch ends is judged by its readings at those ends only.
With one epoch end, only the Python heap is judged (exact; the allocator may
keep freed native pages, which is not growth either).
"""

from __future__ import annotations

from typing import Any

from ..growth import (
    GROWTH_MIN_POINTS,
    HEAP_MIN_MB,
    NATIVE_MIN_MB,
    PLATEAU_AFTER_PASSES,
    channel_growth,
)
from ..growth import grows as _grows
from ..stats import round_or_none
from .findings import ERROR, INFO, WARNING, Finding

MB = 1024 * 1024

# The growth rule itself (minimums, plateau test) lives in stallscope/growth.py, shared with the
# watch's memory drift.

# Allocation sites below this share of the biggest are noise (interpreter caches, queues).
SITE_MIN_SHARE = 0.05

# copy-on-write: private memory gained with RSS flat, when the dataset holds Python objects.
COW_MIN_COPIED_MB = 4.0
COW_MIN_HEAP_MB = 8.0


def _native(p: list[float]) -> float:
    """RSS minus the Python heap and tracemalloc's own bookkeeping and minus the pages of files
    and shared memory it maps (``p[6]``: a memory-mapped dataset's file grows the RSS by what
    was read, page cache the kernel can drop), plus the memory of the processes the worker
    started (``p[5]``), where the point has them."""
    return (
        float(p[2])
        - float(p[1])
        - (float(p[4]) if len(p) > 4 else 0.0)
        + (float(p[5]) if len(p) > 5 else 0.0)
        - (float(p[6]) if len(p) > 6 else 0.0)
    )


def _children(p: list[float]) -> float | None:
    return float(p[5]) if len(p) > 5 else None


def _unjudged() -> dict[str, Any]:
    return {
        "mb_per_1000": 0.0,
        "r2": 0.0,
        "grew_mb": 0.0,
        "first_pass_mb": None,
        "after_plateau_mb_per_1000": None,
        "plateaued_after": None,
    }


def _epoch_channels(
    boundaries: list[list[float]],
) -> tuple[dict[str, Any], dict[str, Any], int] | None:
    """Heap and native growth read at a stream's epoch ends (NOTE [stream epochs]); None
    when the worker saw no epoch end."""
    # A boundary is a point with the epoch appended (the point's length varies by writer).
    ends = [b for b in boundaries if len(b) > 5 and b[-1] >= 1]
    start = next((b for b in boundaries if len(b) > 5 and b[-1] == 0), None)
    if len(ends) >= 2:
        xs = [float(b[0]) for b in ends]
        heap = channel_growth(xs, [float(b[1]) for b in ends], None, HEAP_MIN_MB)
        native = channel_growth(xs, [_native(b[:-1]) for b in ends], None, NATIVE_MIN_MB)
        return heap, native, len(ends)
    if len(ends) == 1 and start is not None:
        xs = [float(start[0]), float(ends[0][0])]
        return (
            channel_growth(xs, [float(start[1]), float(ends[0][1])], None, HEAP_MIN_MB),
            _unjudged(),
            1,
        )
    return None


def _worker_growth(series: dict[str, Any], pass_samples: float | None) -> dict[str, Any] | None:
    points = series.get("points") or []
    if len(points) < GROWTH_MIN_POINTS:
        return None
    xs = [float(p[0]) for p in points]
    heap = [float(p[1]) for p in points]
    native = [_native(p) for p in points]
    by_epoch = _epoch_channels(series.get("epoch_boundaries") or [])
    return {
        "worker": series.get("worker"),
        "samples": xs[-1],
        "heap": channel_growth(xs, heap, pass_samples, HEAP_MIN_MB)
        if by_epoch is None
        else by_epoch[0],
        "native": channel_growth(xs, native, pass_samples, NATIVE_MIN_MB)
        if by_epoch is None
        else by_epoch[1],
        "epoch_ends": 0 if by_epoch is None else by_epoch[2],
        "rss_start": float(points[0][2]),
        "rss_end": float(points[-1][2]),
        "children_start": _children(points[0]),
        "children_end": _children(points[-1]),
        "containers_start": series.get("containers_start") or {},
        "containers_end": series.get("containers_end") or {},
        "sites": series.get("sites") or [],
    }


def growing_containers(
    start: dict[str, list[int]], end: dict[str, list[int]]
) -> list[dict[str, Any]]:
    """The dataset's containers that gained entries or bytes, most entries first."""
    grown = []
    for path, (entries, nbytes) in end.items():
        before = start.get(path, [0, 0])
        if entries > before[0] or nbytes > before[1]:
            grown.append(
                {
                    "attribute": path,
                    "entries_before": before[0],
                    "entries_after": entries,
                    "bytes_before": before[1],
                    "bytes_after": nbytes,
                }
            )
    return sorted(
        grown,
        key=lambda g: (
            g["entries_after"] - g["entries_before"],
            g["bytes_after"] - g["bytes_before"],
        ),
        reverse=True,
    )


def allocation_sites(sites: list[list[Any]]) -> list[dict[str, Any]]:
    """The sites holding a meaningful share of the traced growth, as ``{where, called_from, mb,
    blocks}``."""
    top = max((site[1] for site in sites), default=0.0)
    return [
        {"where": where, "called_from": caller, "mb": mb, "blocks": blocks}
        for where, mb, blocks, caller in sites
        if mb >= SITE_MIN_SHARE * top
    ]


def detect_memory_growth(probes: dict[str, Any]) -> list[Finding]:
    memory = probes.get("memory")
    if not memory:
        return []
    workers = int(memory.get("workers") or 1)
    pass_samples = memory.get("pass_samples")
    per_worker_pass = pass_samples / workers if pass_samples else None
    fits = [
        g
        for g in (_worker_growth(s, per_worker_pass) for s in memory.get("workers_memory") or [])
        if g is not None
    ]
    heap_growing = [g for g in fits if _grows(g["heap"], HEAP_MIN_MB)]
    native_growing = [g for g in fits if _grows(g["native"], NATIVE_MIN_MB)]
    if not heap_growing and not native_growing:
        return []
    length = memory.get("dataset_length")
    available = (probes.get("host") or {}).get("memory_available_bytes")
    # A leak (still growing) before first-pass growth; the Python heap (nameable) before native
    # memory.
    candidates = [("python-heap", g, g["heap"]) for g in heap_growing] + [
        ("native", g, g["native"]) for g in native_growing
    ]
    cause, worst, channel = min(
        candidates,
        key=lambda c: (
            c[2]["plateaued_after"] is not None,
            c[0] != "python-heap",
            -c[2]["grew_mb"],
        ),
    )
    plateau = channel["plateaued_after"]
    containers = growing_containers(worst["containers_start"], worst["containers_end"])
    evidence: dict[str, Any] = {
        # the rate that keeps going: zero-ish after a plateau, the whole slope while growing
        "mb_per_1000_samples": round(
            channel["after_plateau_mb_per_1000"] if plateau is not None else channel["mb_per_1000"],
            2,
        ),
        "python_heap_mb_per_1000_samples": round(worst["heap"]["mb_per_1000"], 2),
        "native_mb_per_1000_samples": round(worst["native"]["mb_per_1000"], 2),
        "plateaued_after_samples": round_or_none(plateau),
        "cause": cause if plateau is None else f"{cause}-first-pass",
        "python_heap_grew_mb": round(worst["heap"]["grew_mb"], 1),
        "native_grew_mb": round(worst["native"]["grew_mb"], 1),
        "first_pass_mb": round_or_none(channel["first_pass_mb"], 1),
        "samples_per_worker": round(worst["samples"]),
        "pass_samples_per_worker": round_or_none(per_worker_pass),
        "rss_mb_start": round(worst["rss_start"], 1),
        "rss_mb_end": round(worst["rss_end"], 1),
        # the processes the worker started, at any depth (None: a record that did not read them)
        "children_mb_start": round_or_none(worst["children_start"], 1),
        "children_mb_end": round_or_none(worst["children_end"], 1),
        "growing_attribute": containers[0]["attribute"]
        if containers and cause == "python-heap"
        else None,
        "containers": containers[:5],
        "allocation_sites": allocation_sites(worst["sites"]) if cause == "python-heap" else [],
        "per_worker": [
            {
                "worker": g["worker"],
                "python_heap_mb_per_1000_samples": round(g["heap"]["mb_per_1000"], 2),
                "native_mb_per_1000_samples": round(g["native"]["mb_per_1000"], 2),
            }
            for g in fits
        ],
        "workers": workers,
        "memory_available_mb": None if not available else round(available / MB, 1),
        "judged_at": "epoch ends" if worst["epoch_ends"] else "samples",
        "epoch_ends_seen": worst["epoch_ends"],
    }
    if plateau is not None:
        return [_first_pass_finding(cause, channel, evidence, workers, length)]
    # One epoch: each worker fetches length / workers samples, so all workers together grow by rate
    # x length.
    projected = channel["mb_per_1000"] * length / 1000 if length else None
    evidence["projected_mb_per_epoch"] = round_or_none(projected, 1)
    severity = (
        ERROR if projected is not None and available and projected * MB > available else WARNING
    )
    epoch = (
        f"; over one epoch of {length:,} samples that is {projected:,.0f} MB across "
        f"{workers} workers"
        if projected
        else ""
    )
    rate = (
        f"{channel['mb_per_1000']:.1f} MB per 1,000 samples (+{channel['grew_mb']:.0f} MB "
        f"over {worst['samples']:,.0f} samples per worker)"
    )
    if worst["epoch_ends"]:
        ends = worst["epoch_ends"]
        where = f"each of {ends} epochs" if ends > 1 else "one epoch"
        rate += (
            f", read at the end of {where} of the stream (it does not return when an epoch ends)"
        )
    elif memory.get("iterable"):
        rate += (
            " within the stream's first epoch (the probe did not reach its end, so "
            "memory a stream frees at the end of "
            "each epoch would look the same)"
        )
    if cause == "python-heap":
        return [_heap_leak_finding(severity, rate, epoch, evidence, containers)]
    passes = worst["samples"] / per_worker_pass if per_worker_pass else 0.0
    if worst["epoch_ends"] >= 2:
        judged = "is not given back at the end of an epoch: a native leak"
    elif passes >= PLATEAU_AFTER_PASSES:
        judged = f"does not level off over {passes:.1f} passes over the same samples: a native leak"
    else:
        judged = (
            "keeps growing over the samples measured: a native leak, or a cache still "
            "filling (fewer than two "
            "passes fit in the budget; a larger --budget shows whether it levels off)"
        )
    children_grew = (worst["children_end"] or 0.0) - (worst["children_start"] or 0.0)
    evidence["children_grew_mb"] = round(children_grew, 1)
    if children_grew > 0.5 * channel["grew_mb"]:
        # Most of it is in the processes the worker started (NOTE [the whole process tree]).
        evidence["grew_in"] = "processes the worker started"
        message = (
            f"Memory outside the Python heap of each worker and the processes it started "
            f"grows by {rate}, {children_grew:.0f} MB of it in those processes (a helper or "
            f"pool the dataset launches inside the worker), and {judged}{epoch}."
        )
        fix = (
            "Find what the processes the dataset starts keep per request (a cache in a decoder "
            "or helper process, results a pool never hands back); bound it, or restart the "
            "helper every so many samples."
        )
    else:
        evidence["grew_in"] = "worker"
        message = (
            f"Native memory (outside the Python heap) of each worker grows by {rate} and "
            f"{judged}{epoch}."
        )
        fix = (
            "Find what keeps native buffers per sample: tensors held in a module-level "
            "list or global cache, a C extension or "
            "decoder that is never closed (files, codecs, sessions); run the pipeline with "
            "num_workers=0 under memray or "
            "heaptrack to see the allocation."
        )
    return [Finding("memory-growth", severity, message, evidence, fix)]


def _heap_leak_finding(
    severity: str, rate: str, epoch: str, evidence: dict[str, Any], containers: list[dict[str, Any]]
) -> Finding:
    sites = evidence["allocation_sites"]
    site = (
        f"; most of it allocated at {sites[0]['called_from'] or sites[0]['where']}" if sites else ""
    )
    if containers:
        top = containers[0]
        name = top["attribute"]
        what = f"{name} grows from {top['entries_before']:,} to {top['entries_after']:,} entries"
        message = (
            f"{what} while the Python heap of each worker grows by {rate}: the dataset "
            f"keeps something from every sample{site}{epoch}."
        )
        fix = (
            f"Bound {name}: a size-limited cache (functools.lru_cache(maxsize=...) or "
            "an LRU dict) instead of an unbounded "
            "list/dict on the dataset, or drop it; if everything must be cached, build "
            "it once in the parent (a NumPy array "
            "or a file) before the workers start."
        )
    else:
        message = (
            f"The Python heap of each worker grows by {rate}: something keeps every sample "
            "(no container on the dataset grew: a module-level or closure "
            f"cache?){site}{epoch}."
        )
        fix = (
            "Bound the cache at the allocation site above "
            "(functools.lru_cache(maxsize=...)), or build what must be kept once in the parent."
        )
    return Finding("memory-growth", severity, message, evidence, fix)


def _first_pass_finding(
    cause: str, channel: dict[str, Any], evidence: dict[str, Any], workers: int, length: int | None
) -> Finding:
    grew = channel["first_pass_mb"]
    after = evidence["plateaued_after_samples"]
    if cause == "native":
        message = (
            f"First-pass growth of {grew:.0f} MB per worker, flat afterwards (after "
            f"{after:,} samples per worker), e.g. a "
            "library cache per input shape: budget for it, it is not a leak."
        )
        fix = (
            f"Budget about {grew:.0f} MB per worker ({grew * workers:.0f} MB for "
            f"{workers} workers) on top of the pipeline's "
            "memory, and keep persistent_workers=True so the cache is not rebuilt every epoch."
        )
        return Finding("memory-growth", INFO, message, evidence, fix)
    name = evidence["containers"][0]["attribute"] if evidence["containers"] else "a cache"
    message = (
        f"The Python heap of each worker grows {grew:.0f} MB during the first pass "
        "over the samples and stays flat afterwards "
        f"(after {after:,} samples per worker): {name} keeps one entry per distinct "
        "sample, a copy in every worker."
    )
    fix = (
        f"Budget for {name} in every worker, bound it "
        "(functools.lru_cache(maxsize=...)), or fill it once in the parent "
        "before the workers start so they share it."
    )
    return Finding("memory-growth", WARNING, message, evidence, fix)


def detect_copy_on_write(probes: dict[str, Any]) -> list[Finding]:
    memory = probes.get("memory")
    if not memory or memory.get("start_method") != "fork":
        return []
    heap = memory.get("python_heap") or {}
    heap_mb = (heap.get("bytes") or 0) / MB
    copied: list[float] = []
    rss_change: list[float] = []
    anon_change: list[float] = []
    samples: list[float] = []
    for series in memory.get("series") or []:
        points = series["points"]
        if len(points) < 2:
            continue
        first, last = points[0], points[-1]
        d_rss = last[1] - first[1]
        if len(first) > 5 and len(last) > 5:
            # Shared pages copied on write turn private-dirty without adding anonymous memory; new
            # allocations add both; library pages mapped lazily, neither (NOTE [copy-on-write
            # measure]).
            d_anon = last[5] - first[5]
            copied.append(max(0.0, (last[4] - first[4]) - max(0.0, d_anon)))
            anon_change.append(d_anon)
        else:  # no smaps_rollup: shared pages that turned private raise USS but not RSS
            copied.append(max(0.0, (last[2] - first[2]) - max(0.0, d_rss)))
        rss_change.append(d_rss)
        samples.append(points[-1][0])
    if not copied:
        return []
    mean_copied = sum(copied) / len(copied)
    if mean_copied < COW_MIN_COPIED_MB or heap_mb < COW_MIN_HEAP_MB:
        return []
    workers = len(copied)
    per_worker_samples = sum(samples) / len(samples)
    length = memory.get("dataset_length")
    fraction = min(1.0, per_worker_samples / length) if length else None
    projected = mean_copied
    if fraction:
        projected = max(mean_copied, min(heap_mb, mean_copied / fraction))
    objects = heap.get("objects") or 0
    at_least = "" if heap.get("complete", True) else "at least "
    share = f" ({fraction:.0%} of the dataset)" if fraction is not None else ""
    message = (
        f"Each fork worker copied {mean_copied:.0f} MB of the parent's memory while "
        f"reading {per_worker_samples:,.0f} samples{share}: "
        f"reading the dataset's {at_least}{objects:,} Python objects ({heap_mb:.0f} "
        "MB) writes their reference counts, which copies their pages "
        f"into every worker (up to {projected:.0f} MB per worker, "
        f"{projected * workers:.0f} MB for {workers} workers, per epoch)."
    )
    evidence = {
        "mb_per_worker": round(mean_copied, 1),
        "per_worker_mb": [round(c, 1) for c in copied],
        "rss_change_mb": [round(r, 1) for r in rss_change],
        "anonymous_change_mb": [round(a, 1) for a in anon_change]
        if len(anon_change) == len(copied)
        else None,
        "parent_python_heap_mb": round(heap_mb, 1),
        "python_objects": objects,
        "heap_measured_completely": heap.get("complete"),
        "samples_per_worker": round(per_worker_samples),
        "dataset_fraction_read": round_or_none(fraction, 4),
        "projected_mb_per_worker": round(projected, 1),
        "workers": workers,
    }
    fix = (
        "Hold per-sample metadata in NumPy arrays (or Arrow/pandas columns, or one "
        "bytes buffer with offsets) instead of a "
        "list/dict of Python objects, so reading a sample writes no reference counts "
        "on shared pages; calling gc.freeze() "
        "before creating the DataLoader also stops the garbage collector from touching them."
    )
    return [Finding("copy-on-write", WARNING, message, evidence, fix)]
