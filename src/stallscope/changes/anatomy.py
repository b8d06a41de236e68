"""What the code-change probes need to know about a pipeline, found by running it (NOTE [applied
code changes] in ``__init__``).

The transform pipeline is found by duck typing (``pipeline.transforms.find_transforms``): an
object with a ``.transforms`` list on the dataset. Everything else is measured on a few items in
this process: the input the dataset hands its transforms (the decoded image), each stage's output,
where the transforms' output lands in the item, and which stages are random. A stage is random when
the same input, under different seeds of ``random``, NumPy and torch, gives different outputs, or
when its name says so (a flip with p=0.5 may agree with itself by chance).
"""

from __future__ import annotations

import contextlib
import copy
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..pipeline.transforms import (
    find_transforms,
    get_path,
    is_random_transform,
    replace_transforms,
    transform_name,
)

SEEDS = (11, 23, 37)  # three draws: a p=0.5 stage agrees with itself under all of them 1 time in 8


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed ``random``, NumPy's legacy generator and torch; restore their states afterwards."""
    import torch

    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


@contextlib.contextmanager
def replaced(replacements: Sequence[tuple[Any, str, Any]]) -> Iterator[None]:
    """Inside: each ``(owner, name, new)`` sets ``owner.name`` to ``new``; the originals are put
    back on the way out."""
    restore: list[tuple[Any, str, Any]] = []
    try:
        for owner, name, new in replacements:
            restore.append((owner, name, getattr(owner, name)))
            setattr(owner, name, new)
        yield
    finally:
        for owner, name, original in reversed(restore):
            setattr(owner, name, original)


def as_array(value: Any) -> np.ndarray | None:
    """A PIL image, tensor or array as a NumPy array (None for anything else)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        array: np.ndarray = value.detach().cpu().numpy()
        return array
    if hasattr(value, "getbands") and hasattr(value, "size"):  # a PIL image
        return np.asarray(value)
    return None


def array_of(value: Any) -> np.ndarray:
    """``as_array`` for a value known to be an image, tensor or array."""
    array = as_array(value)
    if array is None:
        raise TypeError(f"expected an image, tensor or array, got {type(value).__name__}")
    return array


def same(a: Any, b: Any) -> bool:
    x, y = as_array(a), as_array(b)
    if x is not None and y is not None:
        return x.shape == y.shape and x.dtype == y.dtype and bool(np.array_equal(x, y))
    try:
        return bool(a == b)
    except Exception:
        return False


def fresh(value: Any) -> Any:
    """A copy a stage may modify in place (the demo's Normalize does)."""
    if hasattr(value, "clone"):
        return value.clone()
    if hasattr(value, "getbands") and hasattr(value, "copy"):
        return value.copy()
    if isinstance(value, np.ndarray):
        return value.copy()
    return copy.deepcopy(value)


def run_stages(stages: Sequence[Any], value: Any) -> Any:
    for stage in stages:
        value = stage(value)
    return value


class StagesCompose:
    """The stages in order, as a Compose with a ``.transforms`` list (stages still finds and times
    them)."""

    def __init__(self, transforms: Sequence[Any]) -> None:
        self.transforms = list(transforms)

    def __call__(self, value: Any) -> Any:
        return run_stages(self.transforms, value)

    def __repr__(self) -> str:
        return "StagesCompose([" + ", ".join(transform_name(t) for t in self.transforms) + "])"


class Recorder:
    """Stands in for the user's Compose in a probe copy: keeps what goes in and what comes out."""

    def __init__(self, compose: Any) -> None:
        self.compose = compose
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []

    def __call__(self, value: Any) -> Any:
        self.inputs.append(fresh(value))
        out = self.compose(value)
        self.outputs.append(out)
        return out


@dataclass
class Sample:
    index: int
    input: Any  # what the dataset handed its transforms (e.g. the decoded image)
    outputs: list[Any]  # each stage's output under seed SEEDS[0]
    item: Any  # the item the dataset returned

    def input_to(self, stage: int) -> Any:
        """What stage ``stage`` takes: the output of the one before it, or the input."""
        return self.outputs[stage - 1] if stage else self.input


@dataclass
class Anatomy:
    dataset: Any
    compose_path: tuple[Any, ...]
    compose: Any
    stages: list[Any]
    names: list[str]
    first_random: int  # index of the first random stage; len(stages) when none is
    random: list[bool]
    item_slot: tuple[Any, ...] | None  # where the transforms' output sits in the item
    samples: list[Sample]
    seconds_per_sample: float  # one item fetched in this process
    seconds_per_stage: list[float] = field(default_factory=list)
    memo: dict[Any, Any] = field(default_factory=dict)  # what several changes compare against

    def with_compose(self, compose: Any) -> Any:
        """A copy of the user's dataset with its Compose replaced (the original is untouched)."""
        return replace_transforms(self.dataset, {self.compose_path: compose})


class NotApplicable(Exception):
    """Why no code change can be applied to this pipeline (one sentence)."""


def find_slot(item: Any, target: Any, depth: int = 0) -> tuple[Any, ...] | None:
    if item is target:
        return ()
    if depth >= 2:
        return None
    if isinstance(item, (tuple, list)):
        for i, value in enumerate(item):
            found = find_slot(value, target, depth + 1)
            if found is not None:
                return (i, *found)
    if isinstance(item, dict):
        for key, value in item.items():
            found = find_slot(value, target, depth + 1)
            if found is not None:
                return (key, *found)
    return None


def set_slot(item: Any, slot: tuple[Any, ...], value: Any) -> Any:
    """``item`` with the value at ``slot`` replaced (tuples rebuilt, dicts and lists copied)."""
    if not slot:
        return value
    head, rest = slot[0], slot[1:]
    if isinstance(item, tuple):
        items = list(item)
        items[head] = set_slot(items[head], rest, value)
        return type(item)(items) if type(item) is tuple else type(item)(*items)
    clone = copy.copy(item)
    clone[head] = set_slot(item[head], rest, value)
    return clone


def get_slot(item: Any, slot: tuple[Any, ...]) -> Any:
    for key in slot:
        item = item[key]
    return item


def examine(dataset: Any, *, items: int = 3) -> Anatomy:
    """The anatomy of a map-style dataset with a composed transform pipeline (raises
    NotApplicable)."""
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise NotApplicable("the dataset is not map-style (no __getitem__ and __len__)")
    length = len(dataset)
    if length == 0:
        raise NotApplicable("the dataset is empty")
    slots = [s for s in find_transforms(dataset) if len(s.path) >= 2 and s.path[-2] == "transforms"]
    if not slots:
        raise NotApplicable(
            "no composed transform pipeline (an object with a .transforms list) was "
            "found on the dataset"
        )
    compose_path = slots[0].path[:-2]
    mine = [s for s in slots if s.path[:-2] == compose_path]
    compose = get_path(dataset, compose_path)
    stages = list(compose.transforms)
    if len(mine) != len(stages):
        raise NotApplicable("the transform pipeline could not be read stage by stage")
    recorder = Recorder(compose)
    probe = replace_transforms(dataset, {compose_path: recorder})
    samples: list[Sample] = []
    step = max(1, length // max(1, items))
    walls: list[float] = []
    for n in range(min(items, length)):
        index = (n * step) % length
        with seeded(SEEDS[0]):
            start = time.perf_counter()
            item = probe[index]
            walls.append(time.perf_counter() - start)
        if len(recorder.inputs) != n + 1:
            raise NotApplicable("the dataset does not call its Compose once per item")
        value = recorder.inputs[-1]
        slot = find_slot(item, recorder.outputs[-1])
        samples.append(Sample(index, value, [], item))
        if n == 0:
            item_slot = slot
    anatomy = Anatomy(
        dataset=dataset,
        compose_path=compose_path,
        compose=compose,
        stages=stages,
        names=[s.name for s in mine],
        first_random=len(stages),
        random=[False] * len(stages),
        item_slot=item_slot,
        samples=samples,
        seconds_per_sample=min(walls),
    )
    _trace(anatomy)
    return anatomy


def _trace(anatomy: Anatomy) -> None:
    """Each stage's output per sample (seeded), its cost, and which stages are random."""
    stages = anatomy.stages
    costs = [0.0] * len(stages)
    random_flags = [is_random_transform(stage) for stage in stages]
    for sample in anatomy.samples:
        with seeded(SEEDS[0]):
            value = fresh(sample.input)
            for j, stage in enumerate(stages):
                before = value
                start = time.perf_counter()
                value = stage(fresh(before))
                costs[j] += time.perf_counter() - start
                sample.outputs.append(value)
                if not random_flags[j]:
                    outs = []
                    for seed in SEEDS[1:]:
                        with seeded(seed):
                            outs.append(stage(fresh(before)))
                    random_flags[j] = not all(same(value, o) for o in outs)
    # The user's Compose may do more than call its stages in order (albumentations takes image=):
    # the probes rebuild it from its stages, so that must give the same output.
    first = anatomy.samples[0]
    with seeded(SEEDS[0]):
        theirs = anatomy.compose(fresh(first.input))
    if not same(theirs, first.outputs[-1]):
        raise NotApplicable("the Compose does more than call its stages one after another")
    anatomy.random = random_flags
    anatomy.first_random = next((j for j, r in enumerate(random_flags) if r), len(stages))
    anatomy.seconds_per_stage = [c / len(anatomy.samples) for c in costs]
