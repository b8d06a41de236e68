"""Finding a dataset's transform pipeline by duck typing, and rebuilding it with substitutes.

``stallscope stages`` times each transform by name and measures the pipeline
without its random transforms. Neither needs the user to change code: the
transforms are found on the dataset object and replaced, in a *copy* of it,
by proxies (timing) or pass-throughs (the no-augmentation baseline).

What counts as a transform pipeline, on the dataset or a dataset it wraps
(``.dataset`` of a ``Subset``, ``.datasets`` of a ``ConcatDataset``):

* a composed pipeline: any attribute whose value has a ``.transforms`` list or
  tuple of callables (torchvision ``Compose`` v1 and v2, albumentations
  ``Compose``, our demo's ``Compose``); each element is one stage;
* a list or tuple of callables in an attribute whose name mentions
  ``transform``, ``augment`` or ``pipeline``; each element is one stage;
* a single callable in such an attribute (``self.transform = normalize``).

Elements are not opened further: a ``RandomApply`` or ``OneOf`` inside a
``Compose`` is one stage. The user's dataset object is never modified.
"""

from __future__ import annotations

import functools
import re
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .structure import shallow_copy

# Attribute names under which a bare callable or a list of callables is a transform pipeline.
_PIPELINE_NAME = re.compile(r"transform|augment|pipeline|preprocess", re.IGNORECASE)
# Attribute names that hold wrapped datasets (torch Subset, ConcatDataset, user wrappers).
_DATASET_ATTRS = ("dataset", "datasets", "base", "base_dataset")
_PLAIN_PREFIXES = {"transform", "transforms"}
_MAX_DEPTH = 3

# Class/function names of random augmentations (torchvision, albumentations, kornia, our demo;
# MONAI names its random transforms Rand*: RandSpatialCropd, RandRotate90d).
_RANDOM_NAME = re.compile(
    r"^Random|^Rand(?=[A-Z0-9])|Jitter|Flip|Augment|AugMix|Erasing|Noise|Mix[Uu]p|CutMix|Cutout|"
    r"Dropout|ShiftScaleRotate|Elastic|GridDistortion|OpticalDistortion"
)
# Where a transform keeps the probability it is applied with: albumentations' and kornia's ``p``,
# MONAI's ``prob``.
_PROBABILITY_ATTRS = ("p", "prob")


@dataclass(frozen=True)
class TransformSlot:
    """One transform found on a dataset: where it sits and what it is called."""

    path: tuple[Any, ...]  # attribute names / list indices from the dataset to the transform
    name: str  # unique stage name, e.g. "RandomResizedCrop" or "target_transform.Lookup"
    obj: Any
    random: bool

    @property
    def label(self) -> str:
        return self.name


def transform_name(obj: Any) -> str:
    """A readable name: a function's (or partial's) name, else the class name."""
    if isinstance(obj, functools.partial):
        return transform_name(obj.func)
    if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        name = obj.__name__
        return "lambda" if name == "<lambda>" else name
    return type(obj).__name__


def is_random_transform(obj: Any) -> bool:
    """Whether ``obj`` looks like a random augmentation: by name, by a probability below 1, or
    by drawing its own random numbers the way MONAI's ``Randomizable`` transforms do (a
    ``randomize`` method and a ``set_random_state`` to seed it)."""
    if _RANDOM_NAME.search(transform_name(obj)):
        return True
    if callable(getattr(obj, "randomize", None)) and callable(
        getattr(obj, "set_random_state", None)
    ):
        return True
    for attr in _PROBABILITY_ATTRS:
        p = getattr(obj, attr, None)
        if isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 < float(p) < 1.0:
            return True
    return False


def _is_compose(value: Any) -> bool:
    inner = (
        getattr(value, "transforms", None)
        if not isinstance(value, (list, tuple, dict, str))
        else None
    )
    return isinstance(inner, (list, tuple)) and len(inner) > 0 and all(callable(t) for t in inner)


def _is_callable_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(callable(t) for t in value)


def _instance_attrs(obj: Any) -> Iterable[tuple[str, Any]]:
    try:
        items = list(vars(obj).items())
    except TypeError:  # __slots__ or a C object: nothing we can swap safely
        return []
    return [(k, v) for k, v in items if not k.startswith("__")]


def _looks_like_dataset(value: Any) -> bool:
    return hasattr(value, "__getitem__") or hasattr(value, "__iter__")


def find_transforms(dataset: Any) -> list[TransformSlot]:
    """Every transform stage of ``dataset``, in pipeline order, with unique names."""
    found: list[tuple[tuple[Any, ...], str, Any]] = []
    _walk(dataset, (), found, depth=0, seen=set())
    slots: list[TransformSlot] = []
    used: dict[str, int] = {}
    for path, base_name, obj in found:
        count = used.get(base_name, 0) + 1
        used[base_name] = count
        name = base_name if count == 1 else f"{base_name} #{count}"
        slots.append(TransformSlot(path=path, name=name, obj=obj, random=is_random_transform(obj)))
    return slots


def _walk(obj: Any, path: tuple[Any, ...], found: list[Any], *, depth: int, seen: set[int]) -> None:
    if depth > _MAX_DEPTH or id(obj) in seen:
        return
    seen.add(id(obj))
    for attr, value in _instance_attrs(obj):
        if value is None or isinstance(value, (str, bytes, int, float)):
            continue
        prefix = "" if attr in _PLAIN_PREFIXES else f"{attr}."
        if _is_compose(value):
            for index, element in enumerate(value.transforms):
                found.append(
                    ((*path, attr, "transforms", index), prefix + transform_name(element), element)
                )
        elif _PIPELINE_NAME.search(attr) and _is_callable_list(value):
            for index, element in enumerate(value):
                found.append(((*path, attr, index), prefix + transform_name(element), element))
        elif _PIPELINE_NAME.search(attr) and callable(value) and not isinstance(value, type):
            found.append(((*path, attr), prefix + transform_name(value), value))
        elif attr in _DATASET_ATTRS:
            if isinstance(value, (list, tuple)):
                for index, inner in enumerate(value):
                    if _looks_like_dataset(inner):
                        _walk(inner, (*path, attr, index), found, depth=depth + 1, seen=seen)
            elif _looks_like_dataset(value):
                _walk(value, (*path, attr), found, depth=depth + 1, seen=seen)


def replace_transforms(dataset: Any, substitutes: dict[tuple[Any, ...], Any]) -> Any:
    """A copy of ``dataset`` with the transform at each path replaced by its substitute.

    Only the objects on the way to a replaced transform are copied (shallowly):
    the dataset, wrapped datasets, the Compose and its list. Data arrays and
    everything else are shared with the original, which stays untouched.
    """
    if not substitutes:
        return dataset
    return _replace(dataset, {tuple(path): value for path, value in substitutes.items()}, ())


def _replace(obj: Any, substitutes: dict[tuple[Any, ...], Any], here: tuple[Any, ...]) -> Any:
    if here in substitutes:
        return substitutes[here]
    depth = len(here)
    children = {path[depth] for path in substitutes if len(path) > depth and path[:depth] == here}
    if not children:
        return obj
    if isinstance(obj, (list, tuple)):
        items = list(obj)
        for key in children:
            items[key] = _replace(items[key], substitutes, (*here, key))
        return items if isinstance(obj, list) else tuple(items)
    clone = shallow_copy(obj)
    for key in children:
        new_value = _replace(getattr(obj, key), substitutes, (*here, key))
        try:
            object.__setattr__(clone, key, new_value)
        except (AttributeError, TypeError):
            setattr(clone, key, new_value)
    return clone


def get_path(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obj = obj[key] if isinstance(key, int) else getattr(obj, key)
    return obj


def substitute_all(
    dataset: Any, slots: Iterable[TransformSlot], make: Callable[[TransformSlot], Any]
) -> Any:
    """``replace_transforms`` with ``make(slot)`` for each slot."""
    return replace_transforms(dataset, {slot.path: make(slot) for slot in slots})
