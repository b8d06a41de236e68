"""An OpenMMLab loader: mmengine's ``BaseDataset`` with a registered dict-transform pipeline, built
by ``Runner.build_dataloader`` from a config dict, as mmdet and mmpretrain configs do.

- ``make_loader``: two persistent workers, ``pseudo_collate`` (a batch is a dict of lists);
  ``PackToy`` reads the key ``ToyRandomFlip`` sets, so the pipeline fails without the flip.
- ``make_unserialized_loader`` / ``make_serialized_big_loader``: 400,000 annotations kept as
  Python dicts (``serialize_data=False``) or serialised into one NumPy buffer (mmengine's default,
  which exists so that forked workers do not copy the parent's pages).

mmengine is not in the test extras (it requires opencv-python, beside albumentations' headless
OpenCV): the tests that use this file are skipped without it.

TARGETs: ``tests/pipelines/real_mmengine.py:make_loader`` and the two above.
"""

from __future__ import annotations

import numpy as np
from mmengine.dataset import BaseDataset
from mmengine.registry import DATASETS, TRANSFORMS
from mmengine.runner import Runner


@TRANSFORMS.register_module(force=True)
class LoadToyImage:
    def __call__(self, results):
        rng = np.random.default_rng(results["sample_idx"])
        results["img"] = rng.integers(0, 255, size=(96, 96, 3), dtype=np.uint8)
        return results


@TRANSFORMS.register_module(force=True)
class ToyRandomFlip:
    def __init__(self, prob: float = 0.5):
        self.prob = prob

    def __call__(self, results):
        if np.random.rand() < self.prob:  # mmcv's RandomFlip draws from NumPy's global RNG
            results["img"] = results["img"][:, ::-1].copy()
        results["flip_draw"] = float(np.random.rand())
        return results


@TRANSFORMS.register_module(force=True)
class ToyBlur:
    def __call__(self, results):
        img = results["img"].astype(np.float32)
        for _ in range(6):
            img = (img + np.roll(img, 1, 0) + np.roll(img, 1, 1)) / 3.0
        results["img"] = img
        return results


@TRANSFORMS.register_module(force=True)
class PackToy:
    def __call__(self, results):
        import torch

        return {
            "inputs": torch.from_numpy(np.ascontiguousarray(results["img"].transpose(2, 0, 1))),
            "data_samples": {"idx": results["sample_idx"], "flip_draw": results["flip_draw"]},
        }


@DATASETS.register_module(force=True)
class ToyDetDataset(BaseDataset):
    def __init__(self, num: int = 512, **kwargs):
        self.num = num
        super().__init__(**kwargs)

    def load_data_list(self):
        return [{"img_id": i, "boxes": [[i % 7, 1.0, 2.0, 3.0]] * 4} for i in range(self.num)]


PIPELINE = [
    dict(type="LoadToyImage"),
    dict(type="ToyRandomFlip", prob=0.5),
    dict(type="ToyBlur"),
    dict(type="PackToy"),
]


def _build(num_workers: int, batch_size: int, **dataset: object):
    return Runner.build_dataloader(
        dict(
            dataset=dict(type="ToyDetDataset", pipeline=PIPELINE, **dataset),
            sampler=dict(type="DefaultSampler", shuffle=True),
            batch_size=batch_size,
            num_workers=num_workers,
            persistent_workers=num_workers > 0,
            collate_fn=dict(type="pseudo_collate"),
        )
    )


def make_loader(num_workers: int = 2, batch_size: int = 16):
    return _build(num_workers, batch_size, num=512)


def make_unserialized_loader(num_workers: int = 2, batch_size: int = 16):
    return _build(num_workers, batch_size, num=400_000, serialize_data=False)


def make_serialized_big_loader(num_workers: int = 2, batch_size: int = 16):
    return _build(num_workers, batch_size, num=400_000)
