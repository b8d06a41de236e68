"""An OpenCV loader: ``cv2.imread`` → ``cv2.cvtColor`` → ``cv2.resize`` to 320×240 → random crop
(Python's ``random``) and ``cv2.flip`` → normalise → ``torch.from_numpy``, inline in
``__getitem__``. JPEGs of 768×576 on disk. TARGET: ``tests/pipelines/inline_opencv.py:pipeline``.
"""

from __future__ import annotations

import random
from typing import Any

import cv2
import numpy as np
import torch
from _jpeg_files import jpeg_paths
from torch.utils.data import Dataset

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


class OpenCVDataset(Dataset):
    def __init__(self, paths: list, crop: int = 224) -> None:
        self.paths = [str(p) for p in paths]
        self.labels = [i % 10 for i in range(len(self.paths))]
        self.crop = crop

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = cv2.imread(self.paths[index])
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        image = cv2.resize(image, (320, 240), interpolation=cv2.INTER_AREA)
        top = random.randint(0, image.shape[0] - self.crop)
        left = random.randint(0, image.shape[1] - self.crop)
        image = image[top : top + self.crop, left : left + self.crop]
        if random.random() < 0.5:
            image = cv2.flip(image, 1)
        image = (image.astype(np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(image.transpose(2, 0, 1).copy()), self.labels[index]


def pipeline(files: int = 48, batch_size: int = 16) -> dict[str, Any]:
    return {"dataset": OpenCVDataset(jpeg_paths(files)), "batch_size": batch_size}


def small_pipeline() -> dict[str, Any]:
    return pipeline(8, 4)
