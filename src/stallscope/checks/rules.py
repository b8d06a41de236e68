"""Analysis: the probes' measurements -> findings. Pure functions, one per finding code.

Each rule takes the ``check_probes`` dict of a run record (what the probes
measured) and returns findings; none of them runs anything, so they can be
re-applied to a saved record and tested with made-up numbers. The thresholds
are named constants so a reader can see why something was (not) reported.
The memory rules (memory-growth, copy-on-write) live in ``memory_rules.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ..thresholds import SHM_WARN_FRACTION
from .findings import ERROR, WARNING, Finding, sort_findings
from .memory_rules import detect_copy_on_write, detect_memory_growth
from .pickling import FIXES as PICKLE_FIXES
from .rng import duplicated_streams
from .sharding import detect_iterable_duplicates

MB = 1024 * 1024

# slow-samples: an outlier is slower than median + max(K·σ_MAD, MIN_GAP, (RATIO−1)·median)
# and is slow again when fetched a second time (a scheduler hiccup is not).
# Six robust standard deviations: a normal fetch time lands there about once in 10^9 draws.
SLOW_K_MAD = 6.0
# 50 ms: a scheduler slice or page fault costs less, so a smaller gap is no sample's own cost.
SLOW_MIN_GAP_S = 0.05
# 4x the median: a sample must cost several ordinary ones to stall a worker's batch visibly.
SLOW_MIN_RATIO = 4.0
# Fewer timed samples than this give no median and MAD to trust.
SLOW_MIN_SAMPLES = 8
# At most this many outliers are fetched again, to bound the second pass's time.
SLOW_MAX_RETIMED = 20

# shm-too-small: error when in-flight batches exceed free /dev/shm, warning above
# SHM_WARN_FRACTION of it (thresholds.py, shared with the checklist).

# oversubscription: a BLAS/OpenMP pool counts once a worker was seen using more than this many
# cores (1.3: one core plus more than a bookkeeping thread's share).
ACTIVE_POOL_CORES = 1.3

Rule = Callable[[dict[str, Any]], list[Finding]]


def _mb(value: float) -> float:
    return round(value / MB, 1)


def _fmt_s(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _settings(probes: dict[str, Any]) -> dict[str, Any]:
    return probes.get("settings") or {}


def _subject(index: Any, iterable: bool) -> str:
    """``dataset[7]``, or for a stream labelled ``w1#25``: ``item 25 of worker 1's stream``."""
    if iterable and isinstance(index, str) and index.startswith("w") and "#" in index:
        worker, _, position = index[1:].partition("#")
        return f"item {position} of worker {worker}'s stream"
    return f"dataset[{index}]"


# -- unpicklable -----------------------------------------------------------------------------------


def detect_unpicklable(probes: dict[str, Any]) -> list[Finding]:
    pickling = probes.get("pickling")
    if not pickling:
        return []
    pinned_fork = _settings(probes).get("pinned_start_method") == "fork"
    severity = WARNING if pinned_fork else ERROR
    findings = []
    for root in pickling.get("roots") or []:
        if not root["ok"]:
            culprits = root.get("culprits") or []
            first = culprits[0] if culprits else None
            if first is not None:
                more = (
                    f" ({len(culprits) - 1} more "
                    f"attribute{'s' if len(culprits) > 2 else ''} fail too)"
                    if len(culprits) > 1
                    else ""
                )
                message = (
                    f"{first['path']} is a {first['description']}, which cannot be pickled "
                    f"for spawn/forkserver workers{more}."
                )
                fix = PICKLE_FIXES.get(first["kind"], PICKLE_FIXES["object"])
            else:
                message = (
                    f"{root['name']} ({root['type']}) cannot be pickled for "
                    "spawn/forkserver workers."
                )
                fix = PICKLE_FIXES["object"]
            fix += (
                " Until then only the fork start method works; spawn is the default on "
                "macOS and Windows, forkserver on Linux from Python 3.14."
            )
            findings.append(
                Finding(
                    "unpicklable",
                    severity,
                    message,
                    {
                        "object": root["name"],
                        "type": root["type"],
                        "attribute": first["path"] if first else root["name"],
                        "attribute_type": first["kind"] if first else None,
                        "description": first["description"] if first else None,
                        "error": first["error"] if first else None,
                        "culprits": culprits,
                    },
                    fix,
                )
            )
        elif root.get("load_error"):
            findings.append(
                Finding(
                    "unpicklable",
                    severity,
                    f"{root['name']} pickles, but a freshly spawned worker cannot load "
                    f"it ({root['load_error']}).",
                    {
                        "object": root["name"],
                        "type": root["type"],
                        "attribute": root["name"],
                        "attribute_type": "import",
                        "error": root["load_error"],
                        "pickled_bytes": root.get("pickled_bytes"),
                    },
                    PICKLE_FIXES["import"],
                )
            )
    return findings


# -- duplicate-rng ---------------------------------------------------------------------------------


def detect_duplicate_rng(probes: dict[str, Any]) -> list[Finding]:
    rng = probes.get("rng")
    if not rng or rng.get("error") or not rng.get("epochs"):
        return []
    verdict = duplicated_streams(rng)
    if not verdict["any"]:
        return []
    types = {a["path"]: a["type"] for a in rng.get("attributes") or []}
    attributes = [{**a, "type": types.get(a["path"])} for a in verdict["attributes"]]
    fixed = None
    if rng.get("with_seed_worker"):
        fixed = not duplicated_streams(rng, "with_seed_worker")["any"]
    across_workers = verdict["across_workers"] or any(a["across_workers"] for a in attributes)
    across_epochs = verdict["across_epochs"] or any(a["across_epochs"] for a in attributes)
    if across_workers and across_epochs:
        head = "Every worker draws the same random numbers, and the same again every epoch"
    elif across_workers:
        head = "Every worker draws the same random numbers"
    else:
        head = "Each worker draws the same random numbers again every epoch"
    if attributes:
        named = ", ".join(f"{a['path']} ({a['type']})" for a in attributes)
        verb = "is" if len(attributes) == 1 else "are"
        cause = (
            f"{named}, created before the workers started, {verb} copied into each with the same "
            "state"
        )
    elif verdict["globals"]:
        cause = (
            f"the global {'/'.join(verdict['globals'])} RNG is seeded identically in every "
            "worker (a worker_init_fn that reseeds it with a constant?)"
        )
    else:
        cause = (
            "a random generator the dataset does not hold as an attribute (module level or "
            "in a closure) starts from the same state in every worker"
        )
    fix = (
        "Seed per worker: pass worker_init_fn=ss.seed_worker (reseeds random, NumPy, "
        "torch and the generators the dataset holds "
        "from torch's per-worker seed), or create the generator lazily inside the "
        "worker from torch.utils.data.get_worker_info().seed."
    )
    if fixed:
        fix += " Verified: with ss.seed_worker the workers' samples differ."
    elif fixed is False:
        fix += (
            " Here ss.seed_worker did not help (the generator is out of its reach): seed "
            "that generator yourself in worker_init_fn."
        )
    evidence = {
        "workers": rng.get("workers"),
        "start_method": rng.get("start_method"),
        "indices": sorted(set(rng.get("indices") or []), key=lambda i: (str(type(i)), i)),
        "identical_across_workers": across_workers,
        "identical_across_epochs": across_epochs,
        "attributes": attributes,
        "global_rngs_identical": verdict["globals"],
        "fixed_by_seed_worker": fixed,
    }
    return [Finding("duplicate-rng", WARNING, f"{head}: {cause}.", evidence, fix)]


# -- slow-samples, hang, getitem-error, collate-error ----------------------------------------------


def outlier_threshold(median_s: float, mad_s: float) -> float:
    """Fetch time above which a sample is an outlier (robust: median and MAD, plus absolute
    floors)."""
    return median_s + max(
        SLOW_K_MAD * 1.4826 * mad_s, SLOW_MIN_GAP_S, (SLOW_MIN_RATIO - 1.0) * median_s
    )


def slow_candidates(times: dict[Any, float]) -> list[Any]:
    """Indices worth fetching a second time to confirm they are slow (slowest first)."""
    if len(times) < SLOW_MIN_SAMPLES:
        return []
    values = sorted(times.values())
    median = values[len(values) // 2]
    mad = sorted(abs(v - median) for v in values)[len(values) // 2]
    threshold = outlier_threshold(median, mad)
    slow = sorted(((s, i) for i, s in times.items() if s > threshold), reverse=True)
    return [i for _, i in slow[:SLOW_MAX_RETIMED]]


def _confirmed_slow(
    timing: dict[str, Any], slowest: list[list[Any]], retimed: dict[str, float]
) -> tuple[list[tuple[Any, float, float]], list[Any]]:
    """``(index, first, second)`` of outliers slow on both fetches, and the transient ones."""
    threshold = outlier_threshold(timing["median_s"], timing["mad_s"])
    confirmed, transient = [], []
    for index, first, *rest in slowest:
        if first <= threshold:
            continue
        second = retimed.get(str(index), rest[0] if rest else None)
        if second is None:
            continue
        if second > threshold:
            confirmed.append((index, first, second))
        else:
            transient.append(index)
    return confirmed, transient


def detect_slow_samples(probes: dict[str, Any]) -> list[Finding]:
    health = probes.get("health") or {}
    timing = health.get("timing") or {}
    confirmed: list[tuple[Any, float, float]] = []
    transient: list[Any] = []
    median = None
    if (timing.get("count") or 0) >= SLOW_MIN_SAMPLES:
        median = timing["median_s"]
        retimed = {str(i): s for i, s in health.get("retimed") or []}
        confirmed, transient = _confirmed_slow(timing, health.get("slowest") or [], retimed)
    # The memory probe's fetches count too: each index it fetched in two passes was timed twice.
    fetches = (probes.get("memory") or {}).get("fetch_times") or {}
    from_memory: list[Any] = []
    if ((fetches.get("timing") or {}).get("count") or 0) >= SLOW_MIN_SAMPLES:
        known = {str(i) for i, _, _ in confirmed}
        more, _ = _confirmed_slow(fetches["timing"], fetches.get("slowest") or [], {})
        from_memory = [m for m in more if str(m[0]) not in known]
        confirmed += from_memory
        median = fetches["timing"]["median_s"] if median is None else median
    if not confirmed or median is None:
        return []
    threshold = (
        outlier_threshold(median, timing.get("mad_s", 0.0))
        if timing.get("count")
        else outlier_threshold(median, fetches["timing"]["mad_s"])
    )
    worst = max(s for _, s, _ in confirmed)
    factor = worst / median if median > 0 else float("inf")
    shown = ", ".join(str(i) for i, _, _ in confirmed[:10]) + (", …" if len(confirmed) > 10 else "")
    count = len(confirmed)
    message = (
        f"{count} sample{'s' if count > 1 else ''} take{'' if count > 1 else 's'} up "
        f"to {factor:,.0f}× the median fetch time "
        f"({_fmt_s(worst)} vs {_fmt_s(median)}), again when fetched a second time: "
        f"{'indices' if count > 1 else 'index'} {shown}."
    )
    evidence = {
        "indices": [i for i, _, _ in confirmed],
        "seconds": [round(s, 4) for _, s, _ in confirmed],
        "retimed_seconds": [round(r, 4) for _, _, r in confirmed],
        "median_s": median,
        "threshold_s": round(threshold, 4),
        "checked": (timing.get("count") or 0) + (fetches.get("new_indices") or 0),
        "found_by_memory_probe": [i for i, _, _ in from_memory],
        "transient": transient,
    }
    fix = (
        "Look at these samples (unusually large files, remote reads, decoder fallbacks "
        "or retries) and pre-process or cache them; "
        "DataLoader(in_order=False) keeps one slow sample from holding back the "
        "batches queued behind it."
    )
    return [Finding("slow-samples", WARNING, message, evidence, fix)]


def detect_hang(probes: dict[str, Any]) -> list[Finding]:
    health = probes.get("health")
    if not health or not (health.get("hangs") or health.get("unfinished")):
        return []
    hangs = health.get("hangs") or []
    unfinished = health.get("unfinished") or []
    timeout = health.get("timeout_s")
    iterable = health.get("kind") == "iterable"

    def subject(index: Any) -> str:
        return _subject(index, iterable)

    fix = (
        "Bound the blocking call at that line (a timeout on network/file reads and "
        "lock waits) and set DataLoader(timeout=...) "
        "so a stuck worker raises instead of silently stalling training."
    )
    if not hangs:
        # Not proven (the budget ran out before the timeout), but worth a look.
        first = unfinished[0]
        where = first.get("where") or "an unknown place"
        message = (
            f"{subject(first['index'])} was still being fetched after "
            f"{first['running_s']:g} s when the check's budget ran out "
            f"(before its {timeout:g} s timeout); the worker was at {where}."
        )
        evidence = {
            "index": first["index"],
            "timeout_s": timeout,
            "running_s": first["running_s"],
            "where": first.get("where"),
            "stack": first.get("stack"),
            "confirmed": False,
            "unfinished": unfinished,
        }
        return [
            Finding(
                "hang",
                WARNING,
                message,
                evidence,
                fix + " Re-run with a larger --budget or a smaller --timeout to confirm.",
            )
        ]
    first = hangs[0]
    where = first.get("where") or "an unknown place (no Python stack could be read)"
    if first["index"] == "<worker start-up>":
        message = (
            f"A worker did not finish starting within {timeout:g} s (worker_init_fn or "
            f"loading the dataset); it was stuck at {where}."
        )
    else:
        message = (
            f"{subject(first['index'])} did not return within {timeout:g} s; the worker "
            f"was stuck at {where}."
        )
    if len(hangs) > 1:
        message = (
            message[:-1]
            + f" ({len(hangs)} samples hung: {', '.join(str(h['index']) for h in hangs)})."
        )
    evidence = {
        "index": first["index"],
        "timeout_s": timeout,
        "where": first.get("where"),
        "stack": first.get("stack"),
        "worker_pid": first.get("pid"),
        "confirmed": True,
        "hangs": [{"index": h["index"], "where": h.get("where")} for h in hangs],
        "stopped_early": health.get("stopped") == "hangs",
    }
    if unfinished:
        evidence["unfinished"] = unfinished
    control = health.get("fork_control")
    if isinstance(control, dict):
        evidence["fork_control"] = control
        evidence["threads_at_fork"] = health.get("threads_at_fork") or []
        if control.get("returned") is True:
            return [_fork_after_use(subject, first, where, control, evidence)]
        if control.get("returned") is False:
            message = message[:-1] + "; it hung in a worker forked from a fresh interpreter too."
    return [Finding("hang", ERROR, message, evidence, fix)]


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds:.2f} s"


def _fork_after_use(
    subject: Callable[[Any], str],
    first: dict[str, Any],
    where: str,
    control: dict[str, Any],
    evidence: dict[str, Any],
) -> Finding:
    """A hang only in workers forked after this process ran the pipeline (NOTE [fork after
    use] in fork_control.py)."""
    threads = evidence["threads_at_fork"]
    held = f" (this process ran {', '.join(threads)})" if threads else ""
    seconds = control.get("seconds")
    took = f" in {_duration(seconds)}" if isinstance(seconds, (int, float)) else ""
    item = (
        "a worker's start-up" if first["index"] == "<worker start-up>" else subject(first["index"])
    )
    message = (
        f"Workers forked from a process that has already run the pipeline hang: {item} was "
        f"stuck at {where}, and returned{took} in a worker forked from a fresh interpreter. "
        f"The pipeline's library runs on threads it starts at first use{held}; fork copies "
        "their state but not the threads, so the worker waits for them forever."
    )
    evidence["cause"] = "fork-after-use"
    fix = (
        "Start the workers before anything runs the pipeline in the main process (no "
        "single-process pass, no next(iter(loader)) first), or create the library's objects "
        "in each worker (in worker_init_fn, or lazily in the dataset's __iter__/__getitem__), "
        "or use DataLoader(multiprocessing_context='forkserver') where the dataset pickles."
    )
    return Finding("hang", WARNING, message, evidence, fix)


def detect_getitem_error(probes: dict[str, Any]) -> list[Finding]:
    health = probes.get("health")
    if not health:
        return []
    init = health.get("init_error")
    findings = []
    if init and "start-up" not in init.get("message", ""):
        findings.append(
            Finding(
                "getitem-error",
                ERROR,
                f"worker_init_fn raised {init['message']} in a worker, so no sample "
                "could be fetched.",
                {
                    "index": None,
                    "stage": "worker_init_fn",
                    "type": init["message"].split(":")[0],
                    "message": init["message"],
                    "where": init.get("where"),
                },
                "Fix the worker_init_fn (it runs once in every worker before the first fetch).",
            )
        )
    errors = health.get("errors") or []
    if not errors:
        return findings
    total = int(health.get("errors_total") or len(errors))
    checked = int(health.get("fetched") or 0) + total
    first = errors[0]
    types = Counter(e["type"] for e in errors)
    subject = _subject(first["index"], health.get("kind") == "iterable")
    if first["type"] == "WorkerCrash":
        at = f" at {first['where']}" if first.get("where") else ""
        head = (
            f"The worker process died while fetching {subject} "
            f"({first['message'].split('(')[-1].rstrip(')')}){at}"
        )
        fix = (
            "A worker died on this sample (often a decoder crashing on a corrupt file, or "
            "the OOM killer): inspect the file and the decoder."
        )
    else:
        head = f"{subject} raised {first['message']}"
        where = f" (raised at {first['where']})" if first.get("where") else ""
        fix = (
            f"Fix the code path{where} or the data it reads; if some samples are known "
            "to be bad, filter them out of the index "
            "up front: an exception in a worker stops the whole DataLoader."
        )
    tail = f"; {total} of {checked} fetched samples fail" if total > 1 else ""
    evidence = {
        "index": first["index"],
        "type": first["type"],
        "message": first["message"],
        "where": first.get("where"),
        "count": total,
        "checked": checked,
        "indices": [e["index"] for e in errors],
        "types": dict(types),
        "errors": errors[:10],
    }
    findings.append(Finding("getitem-error", ERROR, head + tail + ".", evidence, fix))
    return findings


def detect_collate_error(probes: dict[str, Any]) -> list[Finding]:
    health = probes.get("health")
    collate = (health or {}).get("collate") or {}
    errors = collate.get("errors") or []
    if not errors:
        return []
    first = errors[0]
    structures = [s["structure"] for s in first.get("item_structures") or []]
    mixed = " and ".join(structures[:3]) + (" …" if len(structures) > 3 else "")
    name = collate.get("collate_fn") or "the collate function"
    what = (
        f"; the batch mixed {mixed}"
        if len(structures) > 1
        else (f"; items look like {mixed}" if structures else "")
    )
    message = f"{name} cannot batch the items ({first['error']}){what}."
    shaped = [s for s in structures if "Tensor[" in s or "ndarray[" in s]
    if len(structures) > 1 and len(shaped) == len(structures):
        fix = (
            "Give every item the same shape (resize, crop or pad in the transform) or "
            "pass a collate_fn that pads variable-size "
            "items (e.g. torch.nn.utils.rnn.pad_sequence) with --collate MODULE:FN."
        )
    else:
        fix = (
            "Return tensors, NumPy arrays, numbers, strings, dicts or lists of them "
            "from __getitem__ (never None or custom objects), "
            "or pass a collate_fn that knows how to batch them (--collate MODULE:FN)."
        )
    evidence = {
        "collate_fn": name,
        "failed_batches": collate.get("errors_total"),
        "batches": collate.get("batches"),
        "indices": first.get("indices"),
        "item_structures": first.get("item_structures"),
        "error": first.get("error"),
        "where": first.get("where"),
    }
    return [Finding("collate-error", ERROR, message, evidence, fix)]


# -- shm-too-small, oversubscription ---------------------------------------------------------------


def detect_shm_too_small(probes: dict[str, Any]) -> list[Finding]:
    shm = probes.get("shm")
    if not shm or not shm.get("batch_bytes") or shm.get("free_bytes") is None:
        return []
    workers = int(shm["num_workers"])
    prefetch = int(shm["prefetch_factor"])
    batch = int(shm["batch_bytes"])
    free = int(shm["free_bytes"])
    in_flight = batch * prefetch * workers
    if workers == 0 or in_flight <= SHM_WARN_FRACTION * free:
        return []
    severity = ERROR if in_flight > free else WARNING
    relation = "more than" if in_flight > free else f"over {SHM_WARN_FRACTION:.0%} of"
    message = (
        f"{workers} workers × prefetch_factor {prefetch} × {_mb(batch):,} MB batches "
        f"keep {_mb(in_flight):,} MB in shared memory, "
        f"{relation} the {_mb(free):,} MB free in /dev/shm (workers die with 'bus "
        "error' when it fills)."
    )
    evidence = {
        "batch_mb": _mb(batch),
        "prefetch_factor": prefetch,
        "num_workers": workers,
        "in_flight_mb": _mb(in_flight),
        "shm_free_mb": _mb(free),
        "config_source": shm.get("config_source"),
        "measured_free": shm.get("measured_free", True),
    }
    fix = (
        "Give the container more shared memory (docker run --shm-size=8g or "
        "--ipc=host; Kubernetes: an emptyDir with "
        "medium: Memory mounted at /dev/shm), or lower prefetch_factor / num_workers, "
        "or make batches smaller (uint8 images "
        "instead of float32 are 4× smaller)."
    )
    return [Finding("shm-too-small", severity, message, evidence, fix)]


def detect_oversubscription(probes: dict[str, Any]) -> list[Finding]:
    threads = probes.get("threads")
    if not threads or not threads.get("report"):
        return []
    report = threads["report"]
    workers = int(threads.get("num_workers") or 0)
    cores = int(threads.get("cores") or 1)
    cpu = [c for c in threads.get("worker_cpu_percent") or [] if c is not None]
    busiest = max(cpu) / 100 if cpu else None
    pools = {"torch": int(report.get("torch") or 1)}
    if report.get("cv2"):
        pools["cv2"] = int(report["cv2"])
    # BLAS/OpenMP pools exist in every NumPy process; count them only when a worker
    # was seen keeping more than one core busy, i.e. when they actually run in parallel.
    active = busiest is not None and busiest > ACTIVE_POOL_CORES
    native = {k: int(report[k]) for k in ("openblas", "mkl", "openmp") if report.get(k)}
    if active:
        pools.update(native)
    per_worker = max(pools.values())
    demand = workers * per_worker
    if per_worker <= 1 or workers == 0 or demand <= cores:
        return []
    heavy = {k: v for k, v in pools.items() if v > 1}
    listed = ", ".join(f"{k} {v}" for k, v in heavy.items())
    message = (
        f"{workers} workers × {per_worker} threads each ({listed}) = {demand} threads "
        f"compete for {cores} cores."
    )
    evidence = {
        "num_workers": workers,
        "threads_per_worker": per_worker,
        "pools": pools,
        "native_pools": native,
        "env": report.get("env") or {},
        "cores": cores,
        "demand": demand,
        "worker_cpu_percent": cpu,
    }
    fix = (
        "Cap the threads inside each worker: call torch.set_num_threads(1) (and "
        "cv2.setNumThreads(0) if you use OpenCV) in "
        "worker_init_fn, or export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "
        "OPENBLAS_NUM_THREADS=1; keep num_workers × threads "
        "per worker within the cores."
    )
    return [Finding("oversubscription", WARNING, message, evidence, fix)]


DEFAULT_RULES: list[Rule] = [
    detect_unpicklable,
    detect_duplicate_rng,
    detect_memory_growth,
    detect_iterable_duplicates,
    detect_copy_on_write,
    detect_slow_samples,
    detect_hang,
    detect_getitem_error,
    detect_collate_error,
    detect_shm_too_small,
    detect_oversubscription,
]


def analyse(
    probes: dict[str, Any], rules: list[Rule] | None = None, codes: set[str] | None = None
) -> list[Finding]:
    """Every rule over the measurements; only ``codes`` when given; errors first."""
    findings: list[Finding] = []
    for rule in rules or DEFAULT_RULES:
        findings.extend(rule(probes))
    if codes is not None:
        findings = [f for f in findings if f.code in codes]
    return sort_findings(findings)
