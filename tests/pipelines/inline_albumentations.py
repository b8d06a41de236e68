"""An albumentations pipeline: ``cv2.imread`` → ``cv2.cvtColor`` → ``A.Compose`` (resize to
384×288, random crop 224, flip, brightness/contrast, normalise) called with ``image=`` in
``__getitem__``. JPEGs of 768×576 on disk.
TARGET: ``tests/pipelines/inline_albumentations.py:pipeline``.
"""

from __future__ import annotations

from typing import Any

import albumentations as A
import cv2
import torch
from _jpeg_files import jpeg_paths
from torch.utils.data import Dataset


def train_transform() -> A.Compose:
    return A.Compose(
        [
            A.Resize(288, 384),
            A.RandomCrop(224, 224),
            A.HorizontalFlip(p=0.5),
            A.RandomBrightnessContrast(p=0.8),
            A.Normalize(),
        ]
    )


class AlbumentationsDataset(Dataset):
    def __init__(self, paths: list, transform: A.Compose) -> None:
        self.paths = [str(p) for p in paths]
        self.labels = [i % 10 for i in range(len(self.paths))]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = cv2.imread(self.paths[index])
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        image = self.transform(image=image)["image"]
        return torch.from_numpy(image.transpose(2, 0, 1).copy()), self.labels[index]


def pipeline(files: int = 48, batch_size: int = 16) -> dict[str, Any]:
    return {
        "dataset": AlbumentationsDataset(jpeg_paths(files), train_transform()),
        "batch_size": batch_size,
    }


def small_pipeline() -> dict[str, Any]:
    return pipeline(8, 4)
