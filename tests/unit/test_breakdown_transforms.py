"""Duck-typed transform discovery and copy-on-replace (stallscope.pipeline.transforms)."""

from __future__ import annotations

import pickle

import numpy as np
import stages_shapes as sh
import torch
from torch.utils.data import Subset

from stallscope.breakdown.instrumented import TimedTransform
from stallscope.breakdown.recorder import _ACTIVE, StageRecorder
from stallscope.pipeline.transforms import (
    find_transforms,
    is_random_transform,
    replace_transforms,
    transform_name,
)


def test_torchvision_style_compose_is_found_in_order_with_random_flags():
    dataset = sh.TorchvisionLikeDataset(
        sh.Compose([sh.RandomCrop(), sh.ColorJitter(), sh.Normalize()])
    )
    slots = find_transforms(dataset)
    assert [s.name for s in slots] == ["RandomCrop", "ColorJitter", "Normalize"]
    assert [s.random for s in slots] == [True, True, False]
    assert slots[0].path == ("transform", "transforms", 0)


def test_target_transform_gets_a_prefix_and_duplicates_get_numbers():
    dataset = sh.TorchvisionLikeDataset(
        sh.Compose([sh.Normalize(), sh.Normalize()]), target_transform=sh.add_one
    )
    names = [s.name for s in find_transforms(dataset)]
    assert names == ["Normalize", "Normalize #2", "target_transform.add_one"]


def test_plain_list_lambda_partial_and_function_names():
    dataset = sh.ListDataset([sh.add_one, lambda x: x, sh.partial_scale()])
    assert [s.name for s in find_transforms(dataset)] == [
        "augmentations.add_one",
        "augmentations.lambda",
        "augmentations.scale",
    ]


def test_albumentations_style_probability_marks_random():
    assert is_random_transform(sh.HorizontalFlip(p=0.5))
    assert not is_random_transform(sh.Resize(p=1.0))
    assert transform_name(sh.HorizontalFlip()) == "HorizontalFlip"


class _Randomizable:
    """MONAI's way: the transform owns a RandomState, draws from it in ``randomize`` and is seeded
    through ``set_random_state`` (its DataLoader's worker_init_fn calls it)."""

    def __init__(self, prob=1.0):
        self.prob = prob
        self.R = np.random.RandomState()

    def set_random_state(self, seed=None, state=None):
        self.R = np.random.RandomState(seed)
        return self

    def randomize(self, data=None):
        self._do = self.R.rand() < self.prob

    def __call__(self, data):
        self.randomize(data)
        return data


class SpatialPadd(_Randomizable):  # a name that says nothing: only the interface tells
    pass


class Orientationd:
    def __init__(self, prob=0.3):  # a probability-named number on a deterministic transform
        self.axcodes = "RAS"

    def __call__(self, data):
        return data


class RandSpatialCropd(Orientationd):
    pass


def test_monai_style_random_transforms_are_found_by_name_interface_and_prob():
    assert is_random_transform(RandSpatialCropd())  # Rand* is MONAI's name for random
    assert is_random_transform(SpatialPadd())  # randomize + set_random_state
    assert is_random_transform(type("Thresholdd", (), {"prob": 0.5, "__call__": lambda s, d: d})())
    assert not is_random_transform(Orientationd())
    assert not is_random_transform(type("Rand", (), {})())  # the prefix, then a capital
    assert not is_random_transform(type("Randall", (), {})())
    slots = find_transforms(sh.TorchvisionLikeDataset(sh.Compose([Orientationd(), SpatialPadd()])))
    assert [s.random for s in slots] == [False, True]


def test_wrapped_datasets_are_searched_and_the_original_is_never_modified():
    inner = sh.TorchvisionLikeDataset(sh.Compose([sh.RandomCrop(), sh.Normalize()]))
    subset = Subset(inner, [0, 1, 2])
    slots = find_transforms(subset)
    assert [s.path for s in slots] == [
        ("dataset", "transform", "transforms", 0),
        ("dataset", "transform", "transforms", 1),
    ]
    original_list = inner.transform.transforms
    copy = replace_transforms(subset, {slots[0].path: "X"})
    assert copy.dataset.transform.transforms == ["X", original_list[1]]
    assert inner.transform.transforms is original_list and isinstance(
        original_list[0], sh.RandomCrop
    )
    assert copy.indices == subset.indices and copy.dataset is not inner


def test_nothing_found_on_a_plain_dataset():
    assert find_transforms(sh.NumpyFiles([])) == []


def test_timed_transform_is_transparent_and_picklable():
    inner = sh.HorizontalFlip(p=0.25)
    proxy = TimedTransform("HorizontalFlip", inner)
    assert isinstance(proxy, sh.AlbuTransform) and proxy.p == 0.25
    clone = pickle.loads(pickle.dumps(proxy))
    assert clone.stage_name == "HorizontalFlip" and clone.inner.p == 0.25
    # albumentations-style Compose with its isinstance check, called with keywords
    compose = sh.AlbuCompose([proxy, TimedTransform("Resize", sh.Resize(add=10))])
    recorder = StageRecorder()
    token = _ACTIVE.set(recorder)
    try:
        out = compose(image=np.zeros(2))
    finally:
        _ACTIVE.reset(token)
    assert out["image"].tolist() == [11.0, 11.0]
    assert set(recorder.totals) == {"HorizontalFlip", "Resize"}


def test_compose_without_recorder_runs_unchanged():
    compose = sh.Compose([TimedTransform("add_one", sh.add_one)])
    assert torch.equal(compose(torch.zeros(2)), torch.ones(2))
