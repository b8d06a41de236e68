"""The worker run: the instrumented pipeline through a real DataLoader, stage totals summed
in the main process (NOTE [stage timing] in recorder.py), pin and host→device copies timed there."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from ..errors import PipelineError, UsageError, describe_exception
from ..pipeline.structure import to_device
from ..pipeline.transforms import TransformSlot, substitute_all
from .instrumented import (
    InstrumentedDataset,
    InstrumentedIterableDataset,
    TimedCollate,
    TimedTransform,
)
from .known_calls import known_calls_timed
from .recorder import StageBatch
from .results import DESERIALISE, H2D, PIN, QUEUE, SERIALISE, ProgressFn, RawStageTotals, StageRun


def default_stage_workers() -> int:
    """Fewer workers than cores, so per-stage wall times are not inflated by workers
    competing for a core: 1 on a 2-core machine, up to 4."""
    from ..runtime.host import usable_cores

    return max(1, min(4, usable_cores() // 2))


def instrument_pipeline(pipeline: Any, slots: Sequence[TransformSlot], callees: bool = True) -> Any:
    """A copy of ``pipeline`` whose dataset, transforms and collate record stage times
    (and, with ``callees``, the calls ``__getitem__`` makes: ``callees.py``)."""
    dataset = substitute_all(
        pipeline.dataset, slots, lambda slot: TimedTransform(slot.name, slot.obj)
    )
    if pipeline.is_iterable:
        wrapped: Any = InstrumentedIterableDataset(dataset, callees)
    else:
        wrapped = InstrumentedDataset(dataset, callees)
    return replace(pipeline, dataset=wrapped, collate_fn=TimedCollate(pipeline.collate))


def measure_worker_stages(
    pipeline: Any,
    slots: Sequence[TransformSlot],
    *,
    num_workers: int,
    samples: int,
    max_seconds: float,
    start_method: str | None = None,
    device: str | None = None,
    warmup_batches: int = 1,
    timeout: float = 60.0,
    progress: ProgressFn | None = None,
    callees: bool = True,
) -> tuple[RawStageTotals, StageRun]:
    """Run the instrumented pipeline through a real DataLoader and sum the stage times."""
    from ..config import LoaderConfig
    from ..pipeline.loaders import build_loader
    from ..pipeline.structure import nbytes
    from ..runtime.processes import (
        describe_worker_death,
        is_worker_death,
        no_orphans,
        shutdown_iterator,
        stop_workers,
    )

    instrumented = instrument_pipeline(pipeline, slots, callees)
    bs = pipeline.batch_size
    config = LoaderConfig(
        num_workers=num_workers,
        batch_size=bs,
        prefetch_factor=2 if num_workers else None,
        multiprocessing_context=start_method if num_workers else None,
    )
    warm_batches_total = warmup_batches * max(1, num_workers)
    wanted_batches = warm_batches_total + max(1, math.ceil(samples / bs))
    loader = build_loader(
        instrumented,
        config,
        cycle=wanted_batches,
        timeout=timeout if num_workers else 0.0,
        inside=True,
    )
    cuda = _cuda_device(device)
    raw = RawStageTotals(stage_seconds={}, samples=0, batches=0)
    seen: dict[int, int] = {}
    warmup: list[StageBatch] = []
    arrivals: list[float] = []  # when each batch reached the main process, warm-up included
    started = time.perf_counter()
    deadline = started + max_seconds
    iterator = None
    patch = known_calls_timed() if num_workers == 0 else contextlib.nullcontext()
    if progress is not None:
        progress("stage times in workers", 0.0)
    with no_orphans(), patch:
        try:
            iterator = iter(loader)
            for received in iterator:
                if not isinstance(received, StageBatch):
                    raise PipelineError(
                        "the DataLoader changed the batch type on its way to the main process."
                    )
                arrivals.append(time.perf_counter())
                main_times = _to_device(received.batch, cuda) if cuda is not None else {}
                if seen.get(received.worker, 0) < warmup_batches:
                    seen[received.worker] = seen.get(received.worker, 0) + 1
                    warmup.append(received)
                    continue
                _accumulate(raw, received, main_times, nbytes(received.batch))
                if progress is not None:
                    progress("stage times in workers", min(1.0, raw.samples / max(1, samples)))
                if raw.samples >= samples or time.perf_counter() > deadline:
                    break
        except PipelineError:
            raise
        except Exception as exc:
            dead = stop_workers(iterator, exc)  # NOTE [worker death]
            # A worker dying mid-message can surface as a broken connection before its exit code
            # shows.
            if dead or is_worker_death(exc) or isinstance(exc, (ConnectionError, EOFError)):
                raise PipelineError(
                    describe_worker_death(dead, " while its stages were timed", exc)
                ) from exc
            raise PipelineError(
                f"the pipeline failed while its stages were timed: {describe_exception(exc)}."
            ) from exc
        finally:
            shutdown_iterator(iterator)
            del iterator
    if raw.samples == 0:
        # A short iterable dataset ended during warm-up: use what there is.
        for received in warmup:
            _accumulate(raw, received, {}, nbytes(received.batch))
        warmup = []
    run = StageRun(
        num_workers=num_workers,
        batch_size=bs,
        start_method=effective_start_method(start_method, num_workers),
        device=str(cuda) if cuda is not None else None,
        samples=raw.samples,
        batches=raw.batches,
        warmup_batches=len(warmup),
        seconds=time.perf_counter() - started,
        transforms_found=len(slots),
        batch_interval_ms=batch_interval_ms(arrivals, num_workers),
    )
    return raw, run


def batch_interval_ms(
    arrivals: Sequence[float], num_workers: int, prefetch_factor: int = 2
) -> float | None:
    """The main process's steady time per batch, from the arrival times of a run's batches.

    When the first batch arrives the workers may already hold up to ``num_workers ×
    prefetch_factor`` more, which then arrive at once; they are not counted, so this errs
    long (an upper estimate: NOTE [stages add up] in table.py). None with too few batches."""
    buffered = num_workers * prefetch_factor if num_workers else 0
    intervals = len(arrivals) - 1 - buffered
    if intervals < 2:
        return None
    return 1000.0 * (arrivals[-1] - arrivals[0]) / intervals


def effective_start_method(requested: str | None, num_workers: int) -> str | None:
    """The start method workers get: the one asked for, the one set, or the platform default."""
    from ..runtime.processes import default_start_method

    if num_workers == 0:
        return None
    return requested or default_start_method()


def _accumulate(
    raw: RawStageTotals, received: StageBatch, main_times: dict[str, float], batch_bytes: int
) -> None:
    for name, seconds in received.times.items():
        raw.stage_seconds[name] = raw.stage_seconds.get(name, 0.0) + seconds
    for name, values in received.sample_times.items():
        raw.sample_times.setdefault(name, []).extend(values)
    raw.samples += received.samples
    per_sample = 1.0 / max(1, received.samples)
    raw.batches += 1
    raw.batch_bytes += batch_bytes
    if received.transfer is not None:
        for key, value in asdict(received.transfer).items():
            raw.transfer[key] = raw.transfer.get(key, 0.0) + value
        for name, key in (
            (SERIALISE, "serialise_cpu"),
            (QUEUE, "queue"),
            (DESERIALISE, "deserialise"),
        ):
            raw.sample_times.setdefault(name, []).append(
                getattr(received.transfer, key) * per_sample
            )
    for name, seconds in main_times.items():
        raw.main_seconds[name] = raw.main_seconds.get(name, 0.0) + seconds
        raw.sample_times.setdefault(name, []).append(seconds * per_sample)


def _cuda_device(device: str | None) -> Any:
    """The CUDA device to time pin and host→device copies on, or None (no CUDA, or 'cpu')."""
    if device in (None, "cpu", "none"):
        return None
    import torch

    if device == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else None
    chosen = torch.device(device)
    if chosen.type != "cuda":
        return None
    if not torch.cuda.is_available():
        raise UsageError(f"--device {device} was asked for but CUDA is not available here.")
    return chosen


def _to_device(batch: Any, device: Any) -> dict[str, float]:
    """Pin the batch, then copy it to ``device``, timing both (synchronised: copies are async)."""
    import torch
    from torch.utils.data._utils.pin_memory import pin_memory

    start = time.perf_counter()
    pinned = pin_memory(batch)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    pinned_at = time.perf_counter()
    to_device(pinned, device, non_blocking=True)
    torch.cuda.synchronize(device)
    done = time.perf_counter()
    return {PIN: pinned_at - start, H2D: done - pinned_at}
