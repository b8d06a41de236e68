"""What an attach capture says: data wait of the training thread, where the workers spend their
time, stuck threads and uneven workers, the slowest rank.

Pure functions of the record's ``attach_capture`` (NOTE [attach sampling] in
``attach/probe.py``): every figure is recounted from the stored samples, so ``stallscope report``
judges an older capture by today's rules.

- The **training thread** of a training process is the thread with the most samples inside the
  loader (:data:`DATA_WAIT_FRAMES`), else its main thread. Each of its samples is a *host→device
  copy* (:data:`TRANSFER_FRAMES`, or a user line ending in ``.to(...)``/``.cuda(...)``), else *data
  wait* (inside a loader's ``__next__``), else *other* (checkpoints, logging:
  :data:`OTHER_FRAMES`), else *compute*. The data-wait fraction is data-wait samples over all,
  with a Wilson interval at the shared confidence level; the verdict is ``profile``'s, by the same
  thresholds.
- A **worker** is a process whose main thread runs DataLoader's ``_worker_loop`` (or a thread of a
  training process that runs a dataset's ``__getitem__``: a thread-pool loader). A worker sample
  is busy when it is fetching, collating or sending a batch; busy samples fold into the rows
  ``stages`` prints: the stage the probe marked a frame with (read, decode, collate, serialise,
  pin; ``attach/frames.py``), else the transform (``Class.__call__``/``forward``) or user function
  the sample fell in below the dataset's ``__getitem__``, else ``__getitem__``'s own row. A
  worker's pickler thread adds its busy samples as the serialise row.
- A thread is **stuck** when it stays in one stack (the same functions, whatever the lines) for at
  least ``hang_after_s``; a worker idling for work does not count.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from statistics import NormalDist, median
from typing import Any

from ..thresholds import CONFIDENCE_LEVEL
from .readers import Record, number
from .training import verdict_for

# (file path ending, function name ending) of the frames a training thread waits for data in: a
# loader's __next__ and what it calls. One row per loader kind stallscope knows; a generator that
# feeds the loop shows as its own frame and is added with --data-frames.
DATA_WAIT_FRAMES: tuple[tuple[str, str], ...] = (
    ("torch/utils/data/dataloader.py", "__next__"),
    ("torchdata/stateful_dataloader/stateful_dataloader.py", "__next__"),
    ("torchdata/nodes/loader.py", "__next__"),
    ("torchdata/nodes/base_node.py", "__next__"),
    ("lightning/pytorch/loops/fetchers.py", "__next__"),
    ("pytorch_lightning/loops/fetchers.py", "__next__"),
    ("accelerate/data_loader.py", "__iter__"),
    ("datasets/iterable_dataset.py", "__iter__"),
    ("litdata/streaming/dataloader.py", "__iter__"),
)
# Frames that copy a batch to the device (or pin it first), whatever loop calls them.
TRANSFER_FRAMES: tuple[tuple[str, str], ...] = (
    ("torch/utils/data/_utils/pin_memory.py", ""),
    ("accelerate/utils/operations.py", "send_to_device"),
    ("lightning/fabric/utilities/apply_func.py", "move_data_to_device"),
    ("transformers/trainer.py", "_prepare_input"),
)
# A user line that copies to the device: the copy itself runs in C and has no frame.
TRANSFER_CODE = re.compile(r"\.(?:to|cuda)\s*\(")
# Frames of a training loop's work that is neither the step nor data: checkpoints, logging.
OTHER_FRAMES: tuple[tuple[str, str], ...] = (
    ("torch/serialization.py", "save"),
    ("logging/__init__.py", ""),
    ("tqdm/std.py", ""),
)
WORKER_LOOP = ("torch/utils/data/_utils/worker.py", "_worker_loop")
FETCH_FILE = "torch/utils/data/_utils/fetch.py"
SERIALISE_STAGE = "transfer: serialise"

# A worker whose busy share is this far from the median of the others' is named: at the 30 s
# default and 100 Hz a share is known to about ±0.03 (one standard error), so 0.15 is well past the
# noise and is the gap an uneven shard or a run of slow samples makes.
UNEVEN_BUSY_GAP = 0.15
# Default for --hang-after: longer than any step or sample a healthy job takes.
HANG_AFTER_S = 10.0
STACK_FRAMES_SHOWN = 12

CATEGORIES = ("data wait", "host→device copy", "other", "compute")


@dataclass
class ThreadCount:
    pid: int
    tid: int
    name: str
    role: str  # training | worker | worker-thread | pickler | other
    samples: int


@dataclass
class RankFacts:
    pid: int
    rank: int | None
    tid: int | None
    samples: int
    counts: dict[str, int]
    data_wait_fraction: float | None
    interval: tuple[float, float] | None
    verdict: str | None


@dataclass
class WorkerFacts:
    pid: int
    trainer: int | None
    kind: str  # process | thread
    samples: int
    busy_fraction: float | None
    top_function: str | None
    uneven: bool = False


@dataclass
class StageShare:
    name: str
    kind: str
    samples: int
    share: float
    seconds: float


@dataclass
class FunctionShare:
    name: str
    file: str
    samples: int
    share: float


@dataclass
class StuckThread:
    pid: int
    thread: str
    role: str
    seconds: float
    ongoing: bool  # still in that stack when sampling ended
    stack: list[str]


@dataclass
class AttachFacts:
    pid: int
    duration_s: float | None
    rate_hz: float | None
    interval_s: float
    hang_after_s: float
    samples: int
    counts: dict[str, int]
    data_wait_fraction: float | None
    interval: tuple[float, float] | None
    verdict: str | None
    ranks: list[RankFacts]
    slowest_rank: RankFacts | None
    workers: list[WorkerFacts]
    stages: list[StageShare]
    top_functions: list[FunctionShare]
    stuck: list[StuckThread]
    threads: list[ThreadCount]
    loader_seen: bool
    doing: list[FunctionShare] = field(default_factory=list)  # the training thread's top frames
    sampler: str | None = None
    sampler_errors: int | None = None  # samples the sampler could not read
    worker_of: int | None = None  # the target is a DataLoader worker: its parent's pid

    @property
    def uneven(self) -> list[WorkerFacts]:
        return [w for w in self.workers if w.uneven]


# -- reading the capture ----------------------------------------------------------------


class _Capture:
    """The stored capture with its stacks resolved to frame dicts."""

    def __init__(self, capture: dict[str, Any]) -> None:
        self.frames: list[dict[str, Any]] = [f for f in capture.get("frames") or []]
        self.stacks: list[list[dict[str, Any]]] = [
            [self.frames[i] for i in stack] for stack in capture.get("stacks") or []
        ]
        self.threads: list[dict[str, Any]] = list(capture.get("threads") or [])
        self.interval_s = number(capture.get("interval_s")) or 0.0
        self.processes = {
            int(p["pid"]): p for p in capture.get("processes") or [] if isinstance(p, dict)
        }
        self.trainers = [int(p) for p in capture.get("trainers") or []]
        self.data_frames = tuple(str(n) for n in capture.get("data_frames") or [])

    def counts(self, thread: dict[str, Any]) -> Counter[int]:
        counted: Counter[int] = Counter()
        for stack, n in thread.get("runs") or []:
            counted[int(stack)] += int(n)
        return counted


def _matches(frame: dict[str, Any], table: Sequence[tuple[str, str]]) -> bool:
    file = str(frame.get("file", "")).replace("\\", "/")
    name = str(frame.get("name", ""))
    return any(file.endswith(ending) and name.endswith(fn) for ending, fn in table)


def classify_training_sample(
    stack: Sequence[dict[str, Any]], data_frames: Sequence[str] = ()
) -> str:
    """One of :data:`CATEGORIES` for a training thread's sample (root-first ``stack``)."""
    if any(_matches(f, TRANSFER_FRAMES) for f in stack):
        return "host→device copy"
    leaf = stack[-1] if stack else {}
    if leaf.get("user") and TRANSFER_CODE.search(str(leaf.get("code", ""))):
        return "host→device copy"
    if any(_matches(f, DATA_WAIT_FRAMES) or str(f.get("name", "")) in data_frames for f in stack):
        return "data wait"
    if any(_matches(f, OTHER_FRAMES) for f in stack):
        return "other"
    return "compute"


def wilson_interval(
    hits: int, total: int, level: float = CONFIDENCE_LEVEL
) -> tuple[float, float] | None:
    """The Wilson score interval of ``hits / total`` at ``level`` (None for no samples)."""
    if total <= 0:
        return None
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = hits / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    # at 0 or all hits a bound is exactly 0 or 1 (the formula leaves rounding dust)
    low = 0.0 if hits == 0 else max(0.0, centre - half)
    high = 1.0 if hits == total else min(1.0, centre + half)
    return (low, high)


def _is_worker_process(capture: _Capture, pid: int) -> bool:
    return any(
        _matches(frame, (WORKER_LOOP,))
        for thread in capture.threads
        if thread.get("pid") == pid
        for stack in capture.counts(thread)
        for frame in capture.stacks[stack]
    )


def _trainer_of(capture: _Capture, pid: int) -> int | None:
    seen: set[int] = set()
    current: int | None = pid
    while current is not None and current not in seen:
        if current in capture.trainers:
            return current
        seen.add(current)
        parent = capture.processes.get(current, {}).get("parent")
        current = int(parent) if isinstance(parent, int) else None
    return None


def _worker_part(stack: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The frames below the worker loop (a forked worker's stack starts with its parent's)."""
    for i in range(len(stack) - 1, -1, -1):
        if _matches(stack[i], (WORKER_LOOP,)):
            return list(stack[i + 1 :])
    return list(stack)


def is_busy_worker_sample(stack: Sequence[dict[str, Any]]) -> bool:
    """Fetching, collating or sending a batch (not waiting for the next index)."""
    part = _worker_part(stack)
    return any(
        str(f.get("file", "")).replace("\\", "/").endswith(FETCH_FILE) or f.get("stage")
        for f in part
    )


def _function_label(frame: dict[str, Any]) -> tuple[str, str]:
    """(row name, kind) for a transform (``Class.__call__``/``forward``) or user function."""
    name = str(frame.get("name", "?"))
    for suffix in (".__call__", ".forward"):
        if name.endswith(suffix):
            return name[: -len(suffix)], "transform"
    return name, "user"


def fold_worker_sample(stack: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """(stage row, kind) of a busy worker sample, named as ``stages`` names its rows."""
    part = _worker_part(stack)
    if not part:
        return "?", "other"
    leaf = part[-1]
    if leaf.get("leaf_stage"):
        return str(leaf["leaf_stage"]), str(leaf["leaf_stage"])
    other_at = None
    for i in range(len(part) - 1, -1, -1):
        stage = part[i].get("stage")
        if (
            stage
            and other_at is None
            and not str(part[i].get("name", "")).endswith((".__getitem__", ".__getitems__"))
        ):
            return str(stage), _stage_kind(str(stage))
        if stage and other_at is None:
            other_at = i
    if other_at is None:
        return _function_label(leaf)
    below = part[other_at + 1 :]
    for frame in reversed(below):
        label, kind = _function_label(frame)
        if kind == "transform" or frame.get("user"):
            return label, kind
    return str(part[other_at]["stage"]), "other"


def _stage_kind(stage: str) -> str:
    if stage.startswith("transfer"):
        return "serialise"
    return {"read": "read", "decode": "decode", "collate": "collate", "pin": "pin"}.get(
        stage, "other"
    )


def _innermost_user(stack: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    users: list[dict[str, Any]] = [frame for frame in stack if frame.get("user")]
    return users[-1] if users else None


def _signature(stack: Sequence[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    return tuple((str(f.get("name", "")), str(f.get("file", ""))) for f in stack)


def describe_frame(frame: dict[str, Any]) -> str:
    file = str(frame.get("file", ""))
    short = "/".join(file.replace("\\", "/").split("/")[-2:]) if file else "?"
    return f"{frame.get('name', '?')} ({short}:{frame.get('line', '?')})"


# -- the facts ----------------------------------------------------------------------------


def attach_facts(r: Record) -> AttachFacts | None:
    """Everything attach reports, from the record's ``attach_capture`` (None without one)."""
    raw = r.get("attach_capture")
    if not isinstance(raw, dict):
        return None
    capture = _Capture(raw)
    interval = capture.interval_s
    hang_after = number(raw.get("hang_after_s")) or HANG_AFTER_S
    workers_pids = [
        pid
        for pid in sorted({int(t.get("pid", 0)) for t in capture.threads})
        if pid not in capture.trainers and _is_worker_process(capture, pid)
    ]
    threads: list[ThreadCount] = []
    ranks: list[RankFacts] = []
    training_threads: dict[int, dict[str, Any]] = {}
    for trainer in capture.trainers:
        own = [t for t in capture.threads if t.get("pid") == trainer]
        if not own:
            continue
        chosen = _training_thread(capture, trainer, own)
        training_threads[trainer] = chosen
        ranks.append(_rank_facts(capture, trainer, chosen))
    workers: list[WorkerFacts] = []
    folded: Counter[tuple[str, str]] = Counter()
    functions: Counter[tuple[str, str]] = Counter()
    for thread in capture.threads:
        pid, tid = int(thread.get("pid", 0)), int(thread.get("tid", 0))
        counts = capture.counts(thread)
        total = sum(counts.values())
        role = "other"
        if pid in training_threads and thread is training_threads[pid]:
            role = "training"
        elif pid in workers_pids and tid == pid:
            role = "worker"
            workers.append(_worker_facts(capture, pid, "process", counts, folded, functions))
        elif pid in workers_pids and _pickles(capture, counts):
            role = "pickler"
            for stack, n in counts.items():
                if any(f.get("stage") == SERIALISE_STAGE for f in capture.stacks[stack]):
                    folded[(SERIALISE_STAGE, "serialise")] += n
        elif pid in capture.trainers and _fetches(capture, counts):
            role = "worker-thread"
            facts = _worker_facts(capture, pid, "thread", counts, folded, functions)
            workers.append(facts)
        threads.append(ThreadCount(pid, tid, str(thread.get("name", "")), role, total))
    _mark_uneven(workers)
    busy_total = sum(folded.values())
    stages = sorted(
        (
            StageShare(name, kind, n, n / busy_total if busy_total else 0.0, n * interval)
            for (name, kind), n in folded.items()
        ),
        key=lambda s: (-s.samples, s.name),
    )
    function_total = sum(functions.values())
    top_functions = [
        FunctionShare(name, file, n, n / function_total)
        for (name, file), n in functions.most_common(10)
    ]
    totals: Counter[str] = Counter()
    for rank in ranks:
        totals.update(rank.counts)
    samples = sum(totals.values())
    fraction = totals["data wait"] / samples if samples else None
    loader_seen = totals["data wait"] > 0 or bool(workers)
    slowest = (
        max(
            (rk for rk in ranks if rk.data_wait_fraction is not None),
            key=lambda rk: rk.data_wait_fraction or 0.0,
        )
        if len(ranks) > 1 and any(rk.data_wait_fraction is not None for rk in ranks)
        else None
    )
    stuck = _stuck(capture, training_threads, workers_pids, hang_after)
    doing = [] if loader_seen else _doing(capture, list(training_threads.values()))
    target = int(raw.get("pid", 0))
    worker_of = None
    if not loader_seen and _is_worker_process(capture, target):
        parent = capture.processes.get(target, {}).get("parent")
        worker_of = int(parent) if isinstance(parent, int) else None
    return AttachFacts(
        pid=int(raw.get("pid", 0)),
        duration_s=number(raw.get("duration_s")),
        rate_hz=number(raw.get("rate_hz")),
        interval_s=interval,
        hang_after_s=hang_after,
        samples=samples,
        counts={c: totals[c] for c in CATEGORIES},
        data_wait_fraction=fraction,
        interval=wilson_interval(totals["data wait"], samples),
        verdict=verdict_for(fraction) if loader_seen else None,
        ranks=ranks,
        slowest_rank=slowest,
        workers=workers,
        stages=stages,
        top_functions=top_functions,
        stuck=stuck,
        threads=threads,
        loader_seen=loader_seen,
        doing=doing,
        sampler=str(raw["sampler"]) if raw.get("sampler") else None,
        worker_of=worker_of,
        sampler_errors=int(raw["sampler_errors"])
        if isinstance(raw.get("sampler_errors"), int)
        else None,
    )


def _training_thread(capture: _Capture, pid: int, threads: list[dict[str, Any]]) -> dict[str, Any]:
    def waits(thread: dict[str, Any]) -> int:
        return sum(
            n
            for stack, n in capture.counts(thread).items()
            if classify_training_sample(capture.stacks[stack], capture.data_frames) == "data wait"
        )

    main = next((t for t in threads if t.get("tid") == pid), threads[0])
    best = max(threads, key=waits)
    return best if waits(best) > 0 else main


def _rank_facts(capture: _Capture, pid: int, thread: dict[str, Any]) -> RankFacts:
    counts: Counter[str] = Counter()
    for stack, n in capture.counts(thread).items():
        counts[classify_training_sample(capture.stacks[stack], capture.data_frames)] += n
    total = sum(counts.values())
    fraction = counts["data wait"] / total if total else None
    rank = capture.processes.get(pid, {}).get("rank")
    return RankFacts(
        pid=pid,
        rank=int(rank) if isinstance(rank, int) else None,
        tid=int(thread.get("tid", 0)),
        samples=total,
        counts={c: counts[c] for c in CATEGORIES},
        data_wait_fraction=fraction,
        interval=wilson_interval(counts["data wait"], total),
        verdict=verdict_for(fraction),
    )


def _pickles(capture: _Capture, counts: Counter[int]) -> bool:
    return any(f.get("stage") == SERIALISE_STAGE for stack in counts for f in capture.stacks[stack])


def _fetches(capture: _Capture, counts: Counter[int]) -> bool:
    return any(
        str(f.get("name", "")).endswith((".__getitem__", ".__getitems__"))
        for stack in counts
        for f in capture.stacks[stack]
    )


def _worker_facts(
    capture: _Capture,
    pid: int,
    kind: str,
    counts: Counter[int],
    folded: Counter[tuple[str, str]],
    functions: Counter[tuple[str, str]],
) -> WorkerFacts:
    busy = 0
    own: Counter[tuple[str, str]] = Counter()
    for stack_id, n in counts.items():
        stack = capture.stacks[stack_id]
        if not is_busy_worker_sample(stack):
            continue
        busy += n
        folded[fold_worker_sample(stack)] += n
        user = _innermost_user(_worker_part(stack))
        if user is not None:
            key = (str(user.get("name", "?")), str(user.get("file", "")))
            functions[key] += n
            own[key] += n
    total = sum(counts.values())
    top = own.most_common(1)
    return WorkerFacts(
        pid=pid,
        trainer=_trainer_of(capture, pid),
        kind=kind,
        samples=total,
        busy_fraction=busy / total if total else None,
        top_function=top[0][0][0] if top else None,
    )


def _mark_uneven(workers: list[WorkerFacts]) -> None:
    """Name the workers whose busy share is far from the median of their loader's workers. Of two
    workers neither is the median: the busier one is named (the other waits while it works
    through a longer shard or a slow sample)."""
    by_trainer: dict[int | None, list[WorkerFacts]] = {}
    for w in workers:
        if w.busy_fraction is not None:
            by_trainer.setdefault(w.trainer, []).append(w)
    for group in by_trainer.values():
        if len(group) == 2:
            low, high = sorted(group, key=lambda w: w.busy_fraction or 0.0)
            high.uneven = (high.busy_fraction or 0.0) - (
                low.busy_fraction or 0.0
            ) >= UNEVEN_BUSY_GAP
            continue
        if len(group) < 3:
            continue
        middle = median(w.busy_fraction or 0.0 for w in group)
        for w in group:
            w.uneven = abs((w.busy_fraction or 0.0) - middle) >= UNEVEN_BUSY_GAP


def _stuck(
    capture: _Capture,
    training: dict[int, dict[str, Any]],
    workers: list[int],
    hang_after: float,
) -> list[StuckThread]:
    watched: list[tuple[dict[str, Any], str]] = [(t, "training") for t in training.values()]
    watched += [
        (t, "worker")
        for t in capture.threads
        if int(t.get("pid", 0)) in workers and t.get("tid") == t.get("pid")
    ]
    found = []
    for thread, role in watched:
        runs = [(int(s), int(n)) for s, n in thread.get("runs") or []]
        best: tuple[int, int, int] | None = None  # (samples, stack of the stretch, end index)
        i = 0
        while i < len(runs):
            stack = capture.stacks[runs[i][0]]
            signature = _signature(stack)
            j, count = i, 0
            while j < len(runs) and _signature(capture.stacks[runs[j][0]]) == signature:
                count += runs[j][1]
                j += 1
            idle = role == "worker" and not is_busy_worker_sample(stack)
            if not idle and (best is None or count > best[0]):
                best = (count, runs[i][0], j)
            i = j
        if best is None:
            continue
        seconds = best[0] * capture.interval_s
        if seconds < hang_after:
            continue
        stack = capture.stacks[best[1]]
        shown = _worker_part(stack) if role == "worker" else stack
        found.append(
            StuckThread(
                pid=int(thread.get("pid", 0)),
                thread=str(thread.get("name", "")) or str(thread.get("tid", "")),
                role=role,
                seconds=seconds,
                ongoing=best[2] == len(runs),
                stack=[describe_frame(f) for f in shown[-STACK_FRAMES_SHOWN:]],
            )
        )
    return sorted(found, key=lambda s: -s.seconds)


def _doing(capture: _Capture, threads: list[dict[str, Any]]) -> list[FunctionShare]:
    """The training threads' innermost frames by share: what the process does instead."""
    counted: Counter[tuple[str, str]] = Counter()
    for thread in threads:
        for stack, n in capture.counts(thread).items():
            frames = capture.stacks[stack]
            frame = _innermost_user(frames) or (frames[-1] if frames else None)
            if frame is not None:
                counted[(str(frame.get("name", "?")), str(frame.get("file", "")))] += n
    total = sum(counted.values())
    return [FunctionShare(n, f, c, c / total) for (n, f), c in counted.most_common(3)]


# -- the record's summary keys ----------------------------------------------------------


def attach_summary(facts: AttachFacts) -> dict[str, Any]:
    """The ``attach`` key of SPEC §5, derived from the capture (``report`` recounts it)."""
    return {
        "pid": facts.pid,
        "duration_s": facts.duration_s,
        "samples": facts.samples,
        "rate_hz": facts.rate_hz,
        "data_wait_fraction": facts.data_wait_fraction,
        "interval": list(facts.interval) if facts.interval else None,
        "verdict": facts.verdict,
        "counts": facts.counts,
        "hang_after_s": facts.hang_after_s,
        "sampler_errors": facts.sampler_errors,
        "threads": [asdict(t) for t in facts.threads],
        "workers": [
            {
                "pid": w.pid,
                "samples": w.samples,
                "busy_fraction": w.busy_fraction,
                "kind": w.kind,
                "trainer": w.trainer,
                "top_function": w.top_function,
                "uneven": w.uneven,
            }
            for w in facts.workers
        ],
        "stuck": [
            {
                "pid": s.pid,
                "thread": s.thread,
                "role": s.role,
                "seconds": s.seconds,
                "ongoing": s.ongoing,
                "stack": s.stack,
            }
            for s in facts.stuck
        ],
        "ranks": [
            {
                "pid": rk.pid,
                "rank": rk.rank,
                "samples": rk.samples,
                "data_wait_fraction": rk.data_wait_fraction,
                "interval": list(rk.interval) if rk.interval else None,
                "verdict": rk.verdict,
                "slowest": facts.slowest_rank is rk,
            }
            for rk in facts.ranks
        ],
        "top_functions": [asdict(f) for f in facts.top_functions],
    }


def attach_stage_rows(facts: AttachFacts) -> list[dict[str, Any]]:
    """The ``stages`` rows of an attach record: sampled shares (no per-sample time: sampling
    counts where the workers are, not how many samples they made)."""
    return [
        {
            "name": s.name,
            "ms_per_sample": None,
            "share": s.share,
            "kind": s.kind,
            "samples": s.samples,
            "worker_seconds": s.seconds,
        }
        for s in facts.stages
    ]
