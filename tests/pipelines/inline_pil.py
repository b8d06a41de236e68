"""A hand-written vision dataset that does its work inline in ``__getitem__`` (no transform
list): ``Image.open`` → ``np.asarray(image.convert("RGB"))`` → NumPy random crop, flip and
brightness/contrast jitter → normalise → ``torch.from_numpy``. JPEGs of 768×576 on disk.

``pipeline`` is the TARGET (``tests/pipelines/inline_pil.py:pipeline``); ``resized_pipeline``
first resizes to 320×240 (there a reduced-size decode applies).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from _jpeg_files import jpeg_paths
from PIL import Image
from torch.utils.data import Dataset

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


class InlineJpegDataset(Dataset):
    def __init__(self, paths: list, crop: int = 224, resize: tuple | None = None) -> None:
        self.paths = list(paths)
        self.labels = [i % 10 for i in range(len(self.paths))]
        self.crop = crop
        self.resize = resize

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path = self.paths[index]
        label = self.labels[index]
        image = Image.open(path)
        if self.resize is not None:
            image = image.resize(self.resize, Image.Resampling.BILINEAR)
        array = np.asarray(image.convert("RGB"))
        top = np.random.randint(0, array.shape[0] - self.crop + 1)
        left = np.random.randint(0, array.shape[1] - self.crop + 1)
        array = array[top : top + self.crop, left : left + self.crop]
        if np.random.rand() < 0.5:
            array = array[:, ::-1]
        array = array.astype(np.float32)
        brightness = np.random.uniform(0.7, 1.3)
        contrast = np.random.uniform(0.7, 1.3)
        mean = array.mean()
        array = (array - mean) * contrast + mean * brightness
        array = np.clip(array, 0.0, 255.0) / 255.0
        array = (array - MEAN) / STD
        tensor = torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))
        return tensor, label


def pipeline(files: int = 48, batch_size: int = 16) -> dict[str, Any]:
    return {"dataset": InlineJpegDataset(jpeg_paths(files)), "batch_size": batch_size}


def resized_pipeline(files: int = 48, batch_size: int = 16) -> dict[str, Any]:
    dataset = InlineJpegDataset(jpeg_paths(files), resize=(320, 240))
    return {"dataset": dataset, "batch_size": batch_size}


def small_pipeline() -> dict[str, Any]:
    return pipeline(8, 4)
