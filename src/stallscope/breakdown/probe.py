"""Where a sample's time goes: per-stage costs measured inside the workers (SPEC §3.4).

``ss.stages(target)`` and ``stallscope stages TARGET`` report, per sample:
read/IO, decode, every transform of the dataset's composed pipeline by name,
the rest of ``__getitem__``, collate, the worker→main transfer (serialise,
queue, deserialise), and with CUDA the pin and host→device copies; the
augmentation overhead (the random transforms' cost, cross-checked by running
the pipeline with and without them); the top ``__getitem__`` hot spots
(cProfile); and, when allowed to drop the files from the page cache, the split
between fetching from storage and preparing on the CPU.

How stages are timed inside the workers: NOTE [stage timing] in ``breakdown/recorder.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import PipelineError, UsageError, describe_exception
from ..pipeline.transforms import TransformSlot, find_transforms, substitute_all
from ..runtime.processes import safe_from_worker_deaths
from .inprocess import SkippingBroke, measure_augmentation_differential, profile_hotspots
from .results import Hotspot, ProgressFn, StagesResult, StageTime
from .storage import measure_storage_split
from .table import (
    augmentation_from_stages,
    build_stage_table,
    choose_augmentations,
    mark_doubtful,
    transfer_summary,
)
from .workers import default_stage_workers, measure_worker_stages

# -- the library entry point -------------------------------------------------------------


@safe_from_worker_deaths
def stages(
    target: Any,
    *,
    batch_size: int | None = None,
    collate: str | Callable[[list[Any]], Any] | None = None,
    num_workers: int | None = None,
    samples: int = 256,
    max_seconds: float = 15.0,
    start_method: str | None = None,
    device: str | None = "auto",
    augmentations: Sequence[str] | None = None,
    baseline_transforms: Sequence[str] | None = None,
    differential: bool = True,
    hotspots: int = 10,
    hotspot_samples: int = 200,
    drop_cache: bool = False,
    timeout: float | None = None,
    progress: ProgressFn | None = None,
    callees: bool = True,
) -> StagesResult:
    """Per-stage cost breakdown of a pipeline, measured inside DataLoader workers.

    ``target`` is anything :func:`stallscope.load_target` takes (or a loaded Pipeline).
    ``num_workers`` defaults to about half the usable cores (at least 1), so stage times
    are not inflated by workers competing for cores. The worker run stops after
    ``samples`` measured samples or ``max_seconds``. ``augmentations`` names the
    transforms counted as augmentation; ``baseline_transforms`` instead names those the
    baseline keeps; by default random transforms are detected by name and ``p``.
    ``hotspots=0`` skips cProfile; ``drop_cache=True`` allows dropping the dataset's
    files from the page cache to split storage fetch from CPU preparation.
    ``callees=False`` keeps ``other (__getitem__)`` whole instead of breaking out the
    calls it makes that hold at least 5% of the time (NOTE in ``callees.py``).
    """
    from ..pipeline.preflight import preflight
    from ..target import Pipeline, load_target

    pipeline = (
        target
        if isinstance(target, Pipeline)
        else load_target(target, batch_size=batch_size, collate=collate)
    )
    if not pipeline.has_dataset:
        # A graph or pool pipeline, or a DataLoader whose sampler yields what __getitem__ takes:
        # its own stages, timed where they run (NOTE [declared stages]).
        from .declared import declared_stages

        return declared_stages(pipeline, max_seconds=max_seconds, progress=progress)
    if num_workers is not None and num_workers < 0:
        raise UsageError(f"--num-workers must be 0 or more, not {num_workers}.")
    if samples < 1:
        raise UsageError(f"--samples must be at least 1, not {samples}.")
    slots, copy_problem = _instrumentable_transforms(pipeline.dataset)
    chosen, source = choose_augmentations(
        slots, augmentations=augmentations, baseline_transforms=baseline_transforms
    )
    check = preflight(pipeline)
    verify_stand_in(pipeline, slots, callees)
    workers = default_stage_workers() if num_workers is None else num_workers
    per_batch_s = check.seconds_per_item * pipeline.batch_size
    fetch_timeout = timeout if timeout is not None else max(60.0, 20.0 * per_batch_s)
    raw, run = measure_worker_stages(
        pipeline,
        slots,
        num_workers=workers,
        samples=samples,
        max_seconds=max_seconds,
        start_method=start_method,
        device=device,
        timeout=fetch_timeout,
        progress=progress,
        callees=callees,
    )
    table = build_stage_table(raw, [s.name for s in slots], chosen, in_process=run.num_workers == 0)
    table = mark_doubtful(
        table,
        batch_interval_ms=run.batch_interval_ms,
        num_workers=run.num_workers,
        samples_per_batch=raw.samples / max(1, raw.batches),
    )
    notes = ([copy_problem] if copy_problem else []) + _notes(slots, table)
    overhead = augmentation_from_stages(table, chosen, source)
    if overhead is not None and differential:
        with _in_process("the with/without-augmentation run"):
            try:
                with_ms, without_ms, count = measure_augmentation_differential(
                    pipeline,
                    slots,
                    chosen,
                    samples=min(96, max(16, samples // 2)),
                    progress=progress,
                )
            except SkippingBroke as exc:
                them = "it" if len(chosen) == 1 else "them"
                notes.append(
                    f"the run without {', '.join(chosen)} was not measured: the dataset fails "
                    f"without {them} ({exc}), as a later step needs what {them} made; the "
                    "augmentation's cost is its stage time."
                )
            else:
                overhead.with_ms_per_sample = with_ms
                overhead.without_ms_per_sample = without_ms
                overhead.differential_ms_per_sample = with_ms - without_ms
                overhead.differential_percent = (
                    100.0 * (with_ms - without_ms) / without_ms if without_ms > 0 else None
                )
                overhead.samples = count
    spots: list[Hotspot] = []
    if hotspots > 0:
        with _in_process("profiling __getitem__"):
            spots, _ = profile_hotspots(
                pipeline, samples=hotspot_samples, top=hotspots, progress=progress
            )
    storage = None
    if drop_cache:
        with _in_process("the cold vs warm page-cache run"):
            storage = measure_storage_split(pipeline, progress=progress)
    if drop_cache and storage is None:
        notes.append(
            "--drop-cache: no file reads through Python's open() were seen, so there "
            "was nothing to drop."
        )
    return StagesResult(
        stages=table,
        augmentation_overhead=overhead,
        hotspots=spots,
        run=run,
        transfer=transfer_summary(raw),
        storage=storage,
        notes=notes,
    )


# NOTE [verified stand-ins]
# The stage probe does not time the user's loader itself but a stand-in: the same loader over an
# instrumented copy of the dataset with a timed collate (``workers.instrument_pipeline``). A
# library's loader may refuse it (it checks the dataset's class, calls methods only its own
# dataset has) or yield other batches through it. Before any worker starts, one batch is taken in
# this process from the user's loader as the probe builds it and one from the stand-in; where the
# stand-in raises while the plain one does not, or its batches differ in structure (types, keys,
# dtypes; sizes may differ), the step is not measured and says why (``NotMeasured``), and doctor
# goes on: stallscope's own machinery never turns a loader that iterates into a failure.


def verify_stand_in(pipeline: Any, slots: Sequence[TransformSlot], callees: bool) -> None:
    """Raise ``NotMeasured`` where the instrumented stand-in does not behave like the user's
    loader (NOTE [verified stand-ins]); return where it does, or where the plain loader itself
    fails in this process (the worker run then reports the pipeline's own error)."""
    from ..config import LoaderConfig
    from ..errors import NotMeasured
    from ..pipeline.structure import describe_structure
    from ..pipeline.verify import skeleton
    from .recorder import StageBatch
    from .workers import instrument_pipeline

    config = LoaderConfig(num_workers=0, batch_size=min(2, pipeline.batch_size))
    try:
        plain = describe_structure(_first_batch(pipeline, config))
    except Exception:
        return
    try:
        received = _first_batch(instrument_pipeline(pipeline, slots, callees), config)
    except Exception as exc:
        raise NotMeasured(
            "stage times were not measured: the loader raised "
            f"{describe_exception(exc, 160)} over stallscope's instrumented copy of its dataset, "
            "though not over its own"
        ) from exc
    batch = received.batch if isinstance(received, StageBatch) else received
    timed = describe_structure(batch)
    if not isinstance(received, StageBatch) or skeleton(timed) != skeleton(plain):
        raise NotMeasured(
            "stage times were not measured: over stallscope's instrumented copy of its dataset "
            f"the loader yields {timed}, over its own {plain}"
        )


def _first_batch(pipeline: Any, config: Any) -> Any:
    """The first batch of the loader the stage probe builds for ``pipeline``, in this process."""
    from ..pipeline.kinds import close_trial
    from ..pipeline.loaders import build_loader

    loader = build_loader(pipeline, config, cycle=1, timeout=0.0, inside=True)
    iterator = None
    try:
        iterator = iter(loader)
        return next(iterator)
    finally:
        close_trial(loader, iterator)


def _instrumentable_transforms(dataset: Any) -> tuple[list[TransformSlot], str | None]:
    """The transforms found, if the dataset can be copied to swap them (a dry run)."""
    slots = find_transforms(dataset)
    if not slots:
        return [], None
    try:
        substitute_all(dataset, slots, lambda slot: slot.obj)
    except Exception as exc:
        return [], (
            f"the transforms were not timed one by one: copying the dataset to wrap them raised "
            f"{describe_exception(exc, 120)}; their time is in 'other (__getitem__)'."
        )
    return slots, None


@contextlib.contextmanager
def _in_process(what: str) -> Iterator[None]:
    try:
        yield
    except (UsageError, KeyboardInterrupt):
        raise
    except Exception as exc:
        raise PipelineError(
            f"the pipeline failed during {what}: {describe_exception(exc)}."
        ) from exc


def _notes(slots: Sequence[TransformSlot], table: Sequence[StageTime]) -> list[str]:
    notes: list[str] = []
    if not slots:
        notes.append(
            "no transform pipeline was found on the dataset (a Compose or list of "
            "callables in an attribute); "
            "its work is in 'other (__getitem__)' and the calls broken out of it. Mark "
            "stages with `with ss.stage(NAME):`."
        )
    kinds = {s.kind for s in table}
    if "read" not in kinds and "decode" not in kinds:
        notes.append(
            "read and decode were not seen (no Pillow, OpenCV, NumPy, torch, wave, "
            "soundfile, scipy, librosa, "
            "torchaudio or pandas reads, no ss.stage markers); they are part of 'other "
            "(__getitem__)'."
        )
    return notes
