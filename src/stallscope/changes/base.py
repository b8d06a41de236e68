"""The shape of one code change, and the checks every change shares.

A change is a small object: ``applies(anatomy, pipeline)`` (None, or one sentence on why not),
``apply`` (the changed dataset and, where part of the work moves to the main process, the step
that runs on each batch there), ``side_effect`` (measured: what it costs or alters) and ``patch``
(the change as a diff against the user's file, run for two batches before it is shown).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import describe_exception
from ..pipeline.structure import describe_structure, fetch_for_collate
from ..pipeline.verify import skeleton
from .anatomy import (
    Anatomy,
    StagesCompose,
    as_array,
    fresh,
    get_slot,
    run_stages,
    seeded,
    set_slot,
)
from .source import (
    SourceFile,
    apply_command,
    block_end,
    candidate_files,
    constructor_block,
    enclosing_function,
    exec_patched,
    unified_diff,
)

MainStep = Callable[[Any], Any]


@dataclass
class Applied:
    dataset: Any  # the user's dataset with the change, inside the probe
    main_step: MainStep | None = None  # per batch, in the main process
    fill: bool = False  # the cache needs a first pass before the race
    cleanup: Callable[[], None] | None = None
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Patch:
    diff: str | None  # a unified diff, only when it ran for two batches
    description: str  # the change in words (always)
    verified: bool
    reason: str | None = None  # why no diff is shown
    # the command that applies the diff (``patch -p0 -d FOLDER < change.diff``)
    apply: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"verified": self.verified, "reason": self.reason, "description": self.description}


class Unverified(Exception):
    """Why the patched code did not give the user's batches (one sentence)."""


def patched_class(module: Any, name: str) -> type:
    """The class ``name`` of a patched module (:class:`Unverified` when the patch lost it)."""
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise Unverified(f"the patched module has no class {name}")
    return cls


def verified_patch(
    source: SourceFile, text: str, words: str, verify: Callable[[Any], str | None]
) -> Patch:
    """The change as a diff against the user's file once ``text``, executed as a module beside
    it, passed ``verify`` (which returns, or raises as :class:`Unverified`, why not); else the
    reason, and no diff."""
    try:
        with exec_patched(source, text) as module:
            why = verify(module)
    except Unverified as exc:
        why = str(exc)
    except Exception as exc:  # compiling or running the patched module
        why = f"the patched module failed: {type(exc).__name__}: {exc}"
    if why:
        return Patch(None, words, False, why)
    return Patch(
        unified_diff(source.path, source.text, text),
        words,
        True,
        apply=apply_command(source.path),
    )


class Change:
    """One code change; ``anatomy`` is an ``anatomy.Anatomy`` (a transform list) or an
    ``inline.InlineAnatomy`` (work inline in ``__getitem__``)."""

    id = "change"
    title = "a code change"

    def applies(self, anatomy: Any, pipeline: Any) -> str | None:
        raise NotImplementedError

    def apply(self, anatomy: Any, pipeline: Any) -> Applied:
        raise NotImplementedError

    def side_effect(self, anatomy: Any, pipeline: Any, applied: Applied) -> dict[str, Any]:
        raise NotImplementedError

    def patch(self, anatomy: Any, pipeline: Any) -> Patch:
        raise NotImplementedError


def batches(
    dataset: Any, pipeline: Any, *, main_step: MainStep | None = None, count: int = 2, seed: int = 0
) -> list[Any]:
    """``count`` batches of the first items, fetched in this process under fixed seeds."""
    size = pipeline.batch_size
    length = len(dataset)
    out = []
    with seeded(seed):
        for b in range(count):
            indices = [i % length for i in range(b * size, (b + 1) * size)]
            batch = pipeline.collate(fetch_for_collate(dataset, indices))
            out.append(main_step(batch) if main_step is not None else batch)
    return out


def reference_batches(anatomy: Anatomy, pipeline: Any) -> list[Any]:
    """The user's own two batches under the fixed seeds (taken once per anatomy)."""
    key = ("batches", pipeline.batch_size)
    if key not in anatomy.memo:
        anatomy.memo[key] = batches(anatomy.dataset, pipeline)
    taken: list[Any] = anatomy.memo[key]
    return taken


def max_difference(
    ours: Sequence[Any], theirs: Sequence[Any], slot: tuple[Any, ...]
) -> float | None:
    """Largest absolute difference at ``slot`` between two lists of batches (None: not
    comparable)."""
    worst = 0.0
    for a, b in zip(ours, theirs):
        x, y = as_array(get_slot(a, slot)), as_array(get_slot(b, slot))
        if x is None or y is None or x.shape != y.shape:
            return None
        worst = max(
            worst,
            float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0,
        )
    return worst


def same_structure(ours: Sequence[Any], theirs: Sequence[Any]) -> str | None:
    """None when the batches look alike (types, keys, dtypes, shapes), else what differs."""
    for a, b in zip(ours, theirs):
        sa, sb = describe_structure(a), describe_structure(b)
        if skeleton(sa) != skeleton(sb) or sa != sb:
            return f"its batches look like {sa}, yours like {sb}"
    return None


def run_two_batches(
    make: Callable[[], tuple[Any, MainStep | None]],
    anatomy: Anatomy,
    pipeline: Any,
    *,
    tolerance: float | None,
) -> str | None:
    """Build the patched pipeline with ``make`` and take two batches; None when they match the
    user's in structure (and within ``tolerance`` at the image slot, when given), else why not."""
    try:
        dataset, step = make()
        ours = batches(dataset, pipeline, main_step=step)
    except Exception as exc:
        return f"running the patched code raised {describe_exception(exc, 160)}"
    theirs = reference_batches(anatomy, pipeline)
    differs = same_structure(ours, theirs)
    if differs:
        return differs
    if tolerance is not None and anatomy.item_slot is not None:
        diff = max_difference(ours, theirs, anatomy.item_slot)
        if diff is None or diff > tolerance:
            return f"its batches differ from yours by {diff} (more than {tolerance:g})"
    return None


def fastest_seconds(
    fn: Callable[[], Any], *, repeats: int = 7, threads: int | None = None
) -> float:
    """The fastest of ``repeats`` calls: CPU cost, without the time slices a busy machine takes
    away. ``threads=1`` times work as a DataLoader worker runs it (torch sets one intra-op thread
    there)."""
    import torch

    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous)
    return min(times)


def nbytes_at(batch: Any, slot: tuple[Any, ...]) -> int:
    value = get_slot(batch, slot)
    return (
        int(value.numel() * value.element_size())
        if hasattr(value, "element_size")
        else int(getattr(value, "nbytes", 0))
    )


def copy_batch(batch: Any) -> Any:
    if isinstance(batch, (list, tuple)):
        return type(batch)(copy_batch(b) for b in batch)
    if isinstance(batch, dict):
        return {k: copy_batch(v) for k, v in batch.items()}
    return batch.clone() if hasattr(batch, "clone") else batch


def rebuilt_compose(
    module: Any, function: str | None, anatomy: Anatomy, start: int, replacement: Any
) -> Any:
    """The Compose the patched function builds (when it takes no required argument), else the
    user's stages up to ``start`` followed by the patched module's ``replacement``."""
    import inspect

    func = getattr(module, function, None) if function else None
    if func is not None:
        try:
            inspect.signature(func).bind()
        except TypeError:
            func = None
    if func is not None:
        compose = func()
        if hasattr(compose, "transforms"):
            return compose
    return StagesCompose([*anatomy.stages[:start], replacement])


class MovedTail(Change):
    """A change to the user's list of transforms that takes the stages from ``start`` on out of
    the workers and does their work on each batch, in the main process or on the accelerator.

    A subclass finds ``start`` on the measured items (``measure``, once ``applies`` has checked
    that the item holds the transforms' output as it is) and says how the list changes:
    ``words``, ``rewrite`` and ``rebuild`` (see :meth:`patch`)."""

    start: int
    tolerance: float  # at the image slot, between the patched batches and the user's

    def applies(self, anatomy: Anatomy, pipeline: Any) -> str | None:
        if anatomy.item_slot is None:
            return "the dataset does not return its transforms' output as it is"
        return self.measure(anatomy, pipeline)

    def measure(self, anatomy: Anatomy, pipeline: Any) -> str | None:
        """None when the change applies (``start`` and what it needs kept), else why not."""
        raise NotImplementedError

    def words(self, names: list[str]) -> str:
        """The change in words, ``names`` being the moved stages' classes."""
        raise NotImplementedError

    def rewrite(self, lines: list[str], first: int, last: int) -> str:
        """Edit ``lines[first : last + 1]``, the moved stages' lines, in place; the helper code
        to append, under its heading (:func:`~.source.helper_block`)."""
        raise NotImplementedError

    def rebuild(self, anatomy: Anatomy, module: Any, function: str | None) -> tuple[Any, MainStep]:
        """The dataset and the batch step the patched ``module`` gives (``function``: the one
        that builds the list, when there is one)."""
        raise NotImplementedError

    def worker_seconds(self, anatomy: Anatomy) -> float:
        """What the moved stages cost a worker on the first measured item."""
        image = anatomy.samples[0].input_to(self.start)
        return fastest_seconds(
            lambda: run_stages(anatomy.stages[self.start :], fresh(image)), threads=1
        )

    def patch(self, anatomy: Anatomy, pipeline: Any) -> Patch:
        """The change as a verified patch of the user's list of transforms.

        The list is found in the source files of the dataset, its Compose and its stages (the
        constructors of the moved stages, one per line). The patched module must give two
        batches like the user's (within ``tolerance`` at the image slot, unless a moved stage is
        random)."""
        names = [type(s).__name__ for s in anatomy.stages[self.start :]]
        words = self.words(names)
        files = candidate_files([anatomy.dataset, anatomy.compose, *anatomy.stages])
        found = constructor_block(files, names)
        if found is None:
            return Patch(
                None,
                words,
                False,
                f"no list with {', '.join(n + '()' for n in names)} one per line was found",
            )
        source, first = found
        lines = list(source.lines)
        helpers = self.rewrite(lines, first, block_end(lines, first, names[-1]))
        text = "".join(lines) + helpers
        function = enclosing_function(source, first)
        tolerance = None if any(anatomy.random[self.start :]) else self.tolerance

        def verify(module: Any) -> str | None:
            return run_two_batches(
                lambda: self.rebuild(anatomy, module, function),
                anatomy,
                pipeline,
                tolerance=tolerance,
            )

        return verified_patch(source, text, words, verify)


def batch_step_seconds(step: MainStep, batch: Any) -> float:
    """What ``step`` costs the main process on ``batch`` (on a copy: a step may work in place)."""
    return fastest_seconds(lambda: step(copy_batch(batch)), repeats=5)


def moved_work(worker_saved_s: float, main_added_s: float) -> dict[str, float]:
    """A moved tail's costs, as its side effect states them."""
    return {
        "worker_ms_per_sample_saved": round(1000 * worker_saved_s, 4),
        "main_ms_per_batch_added": round(1000 * main_added_s, 4),
    }


def compared_batch(
    anatomy: Anatomy, pipeline: Any, applied: Applied
) -> tuple[Any, Any, float | None]:
    """The changed pipeline's first batch as its workers send it, the user's first batch, and the
    largest difference between the two at the image slot once the main-process step has run."""
    raw = batches(applied.dataset, pipeline, count=1)[0]
    ours = applied.main_step(copy_batch(raw)) if applied.main_step else raw
    theirs = reference_batches(anatomy, pipeline)[0]
    return raw, theirs, max_difference([ours], [theirs], anatomy.item_slot or ())


def slot_step(anatomy: Anatomy, fn: Any) -> Any:
    slot = anatomy.item_slot or ()
    return lambda batch: set_slot(batch, slot, fn(get_slot(batch, slot)))
