"""The CPU cost of one sample, measured in this process (issue 18: the ceiling and the cores
needed).

The user's own loader runs single-process (``num_workers=0``, the user's batches, sampler and
collate) with one intra-op thread, as DataLoader workers run. After two warm-up batches the
process's CPU time (all its threads, not wall time: on a busy machine the wall clock counts the
time other processes held the cores) is read over a window of at least ``min_window_s`` seconds.
CPU seconds per sample is what each sample costs whichever process makes it, so the usable cores
divided by it is the most this machine can make (``analysis/ceiling.py``). The wall time per
sample is kept too: the single-process rate behind parallel efficiency (SPEC §3.2) where no
sweep measured one.

``measure_loader_rate`` measures one more configuration the plain way (the loader a training loop
ran, for ``profile``), with the main process's receive cost (NOTE [receive cost] in measure.py).
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from ..config import LoaderConfig
from ..pipeline.kinds import close_trial
from ..pipeline.loaders import EpochCycle, build_loader, close_threads
from ..runtime.host import usable_cores
from ..target import Pipeline
from .measure import _CYCLE_TOTAL, _END, _count, _cycles_itself, _next, _set_threads, measure

WARMUP_BATCHES = 2


@dataclass
class CpuCost:
    """CPU and wall seconds per sample of the pipeline, single-process."""

    cpu_s_per_sample: float
    wall_s_per_sample: float
    samples: int
    batches: int
    window_s: float
    batch_size: int
    torch_threads: int = 1
    config_label: str = ""
    usable_cores: int = 0  # runtime/host.py: affinity and cgroup quota
    # Cores other processes kept busy during the window (on the CPUs this process may use): a
    # machine shared with other work gives the loader fewer cores than the ceiling counts.
    others_busy_cores: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def can_run_single_process(pipeline: Pipeline) -> bool:
    """Whether stallscope can run this loader kind in one process (NOTE [loader kinds])."""
    return pipeline.kind.rebuilds_from_parts or "num_workers" in pipeline.kind.knobs


def measure_cpu_cost(
    pipeline: Pipeline,
    *,
    min_window_s: float = 1.0,
    max_window_s: float = 10.0,
    min_batches: int = 2,
    timeout: float = 60.0,
) -> CpuCost | None:
    """The pipeline's CPU seconds per sample over a window of at least ``min_window_s`` seconds;
    None where the loader cannot run single-process or delivers nothing."""
    if not can_run_single_process(pipeline):
        return None
    config = pipeline.baseline.replace(
        batch_size=pipeline.batch_size, num_workers=0, pin_memory=False
    )
    sizes: deque[int] = deque()
    loader = build_loader(
        pipeline, config, cycle=_CYCLE_TOTAL, sizes=sizes, timeout=timeout, seed=0
    )
    iterator: Any = None
    previous = _set_threads(1)  # as in a DataLoader worker
    try:
        iterator = EpochCycle(loader) if _cycles_itself(pipeline) else iter(loader)
        for _ in range(WARMUP_BATCHES):  # lazy initialisation: file handles, caches, allocators
            if _next(iterator) is _END:
                return None
            _count(sizes, None)
        busy0 = _busy_cpu_seconds()
        cpu0, wall0 = tree_cpu_seconds(), time.perf_counter()
        samples = batches = 0
        while True:
            batch = _next(iterator)
            if batch is _END:
                break
            samples += _count(sizes, batch)
            batches += 1
            del batch
            elapsed = time.perf_counter() - wall0
            if (elapsed >= min_window_s and batches >= min_batches) or elapsed >= max_window_s:
                break
        cpu, wall = tree_cpu_since(cpu0), time.perf_counter() - wall0
        busy1 = _busy_cpu_seconds()
    finally:
        if not pipeline.kind.rebuilds_from_parts:
            close_trial(loader, iterator)
        close_threads(loader)
        _set_threads(previous)
    if samples <= 0 or cpu <= 0:
        return None
    return CpuCost(
        cpu_s_per_sample=cpu / samples,
        wall_s_per_sample=wall / samples,
        samples=samples,
        batches=batches,
        window_s=wall,
        batch_size=config.batch_size,
        config_label=config.label(),
        usable_cores=usable_cores(),
        others_busy_cores=None
        if busy0 is None or busy1 is None
        else round(max(0.0, (busy1 - busy0 - cpu) / wall), 3),
    )


def tree_cpu_seconds() -> float:
    """CPU seconds so far of this process (all its threads) and of every process it started, at
    any depth, the ended ones included (a pool the loader starts is the loader's: NOTE [the whole
    process tree] in runtime/resources.py; NOTE [CPU of processes that end] in
    runtime/processes.py)."""
    from ..runtime.processes import tree_cpu

    own, started = tree_cpu(own=time.process_time)
    return own + started


def tree_cpu_since(start: float) -> float:
    """CPU seconds the tree spent since ``start`` (a :func:`tree_cpu_seconds` reading): processes
    born since count from zero, and those that ended meanwhile with all they spent."""
    return max(0.0, tree_cpu_seconds() - start)


def _busy_cpu_seconds() -> float | None:
    """CPU seconds the CPUs this process may use have spent busy (all processes), or None."""
    try:
        import psutil

        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        per_cpu = psutil.cpu_times(percpu=True)
    except Exception:
        return None
    busy = 0.0
    for index, times in enumerate(per_cpu):
        if allowed is None or index in allowed:
            busy += sum(times) - times.idle - getattr(times, "iowait", 0.0)
    return busy


def measure_loader_rate(
    pipeline: Pipeline, config: LoaderConfig, *, min_window_s: float = 1.0, timeout: float = 60.0
) -> dict[str, Any]:
    """One steady-state measurement of ``config``: ``{config, label, samples_per_s,
    main_ms_per_batch, cpu_ms_per_sample}``."""
    from .sweep import loader_cpu_ms_per_sample, main_ms_per_batch

    m = measure(pipeline, config, min_window_s=min_window_s, timeout=timeout)
    return {
        "config": config.to_dict(),
        "label": config.label(),
        "samples_per_s": m.samples_per_s,
        "main_ms_per_batch": main_ms_per_batch([m]),
        "cpu_ms_per_sample": loader_cpu_ms_per_sample([m]),
    }
