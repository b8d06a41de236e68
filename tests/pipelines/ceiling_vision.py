"""A CPU-bound vision pipeline, the common case the ceiling is about (issue 18): JPEG decode of
larger source images (512×384, procedurally generated and encoded once, in memory) + random
resized crop to 224 + horizontal flip + colour jitter + normalise to float. Pillow, NumPy and
torch only (small transform classes of our own; no torchvision).
"""

from __future__ import annotations

import io
import math
import random

import numpy as np
import torch
from PIL import Image, ImageEnhance
from torch.utils.data import DataLoader, Dataset

SOURCE_SIZE = (512, 384)
CROP = 224
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def make_jpegs(count: int, size: tuple[int, int] = SOURCE_SIZE, seed: int = 0) -> list[bytes]:
    """``count`` photograph-like JPEGs: smooth gradients, blobs and noise (so the decoder
    has detail)."""
    rng = np.random.default_rng(seed)
    w, h = size
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    out = []
    for _ in range(count):
        image = np.zeros((h, w, 3), dtype=np.float32)
        for c in range(3):
            a, b, phase = rng.uniform(0.002, 0.02, 2).tolist() + [rng.uniform(0, math.tau)]
            image[..., c] = 128 + 80 * np.sin(a * x + b * y + phase)
        for _ in range(6):
            cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(20, 120)
            mask = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
            image += mask[..., None] * rng.uniform(-90, 90, 3).astype(np.float32)
        image += rng.normal(0, 12, image.shape).astype(np.float32)
        buffer = io.BytesIO()
        Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(
            buffer, format="JPEG", quality=90
        )
        out.append(buffer.getvalue())
    return out


class Compose:
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, value):
        for t in self.transforms:
            value = t(value)
        return value


class RandomResizedCrop:
    def __init__(self, size: int = CROP, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
        self.size, self.scale, self.ratio = size, scale, ratio

    def __call__(self, image: Image.Image) -> Image.Image:
        w, h = image.size
        for _ in range(10):
            area = w * h * random.uniform(*self.scale)
            aspect = math.exp(random.uniform(math.log(self.ratio[0]), math.log(self.ratio[1])))
            cw, ch = int(round(math.sqrt(area * aspect))), int(round(math.sqrt(area / aspect)))
            if 0 < cw <= w and 0 < ch <= h:
                left, top = random.randint(0, w - cw), random.randint(0, h - ch)
                break
        else:
            cw = ch = min(w, h)
            left, top = (w - cw) // 2, (h - ch) // 2
        return image.resize(
            (self.size, self.size), Image.BILINEAR, box=(left, top, left + cw, top + ch)
        )


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5):
        self.p = p

    def __call__(self, image: Image.Image) -> Image.Image:
        return image.transpose(Image.FLIP_LEFT_RIGHT) if random.random() < self.p else image


class ColorJitter:
    def __init__(self, brightness: float = 0.4, contrast: float = 0.4, saturation: float = 0.4):
        self.amounts = [
            (ImageEnhance.Brightness, brightness),
            (ImageEnhance.Contrast, contrast),
            (ImageEnhance.Color, saturation),
        ]

    def __call__(self, image: Image.Image) -> Image.Image:
        order = list(self.amounts)
        random.shuffle(order)
        for enhancer, amount in order:
            image = enhancer(image).enhance(random.uniform(1 - amount, 1 + amount))
        return image


class ToNormalizedTensor:
    def __call__(self, image: Image.Image) -> torch.Tensor:
        array = np.asarray(image, dtype=np.float32) / 255.0
        return torch.from_numpy(((array - MEAN) / STD).transpose(2, 0, 1).copy())


def train_transforms() -> Compose:
    return Compose(
        [RandomResizedCrop(), RandomHorizontalFlip(), ColorJitter(), ToNormalizedTensor()]
    )


class JpegDataset(Dataset):
    """Encoded JPEGs in memory, decoded and augmented per sample; label = index mod 10."""

    def __init__(self, images: int = 64, length: int = 2048, seed: int = 0):
        self.jpegs = make_jpegs(images, seed=seed)
        self.length = length
        self.transform = train_transforms()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        image = Image.open(io.BytesIO(self.jpegs[index % len(self.jpegs)]))
        image = image.convert("RGB")
        return self.transform(image), index % 10


def loader() -> DataLoader:
    """The user's loader as it might be written: shuffled, batch 32, single-process."""
    return DataLoader(JpegDataset(), batch_size=32, shuffle=True)


def small_loader() -> DataLoader:
    """Fewer source images and batch 16: the same costs per sample, for short tests."""
    return DataLoader(JpegDataset(images=16, length=512), batch_size=16, shuffle=True)
