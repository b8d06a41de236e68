"""A dataset whose augmentation is a real albumentations ``Compose`` (for ``stages``).

Images are small uint8 arrays; ``SleepyShift`` costs a known 3 ms per call, so
its stage time is known; ``HorizontalFlip(p=0.5)`` is the random augmentation.
"""

from __future__ import annotations

import time

import albumentations as A
import numpy as np
import torch
from torch.utils.data import Dataset

SLEEPY_S = 0.003


class SleepyShift(A.ImageOnlyTransform):
    """Rolls the image by one pixel after a known 3 ms sleep."""

    def __init__(self, p: float = 1.0) -> None:
        super().__init__(p=p)

    def apply(self, img, **params):
        time.sleep(SLEEPY_S)
        return np.roll(img, 1, axis=1)


class AlbumentationsImages(Dataset):
    def __init__(self, length: int = 96) -> None:
        rng = np.random.default_rng(0)
        self.images = [rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for _ in range(length)]
        self.transform = A.Compose([A.HorizontalFlip(p=0.5), SleepyShift(), A.Normalize()])

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        image = self.transform(image=self.images[index])["image"]
        return torch.from_numpy(image).permute(2, 0, 1), index % 2


def make_dataset() -> AlbumentationsImages:
    return AlbumentationsImages()
