"""A CPU-bound vision look-alike for the code-change probes (issue 18, part 3).

JPEG decode of larger source images (768×576, painted once per process and
encoded in memory), then random resized crop to 224, horizontal flip, colour
jitter and normalise to float: the shape of an ImageNet training pipeline,
Pillow + NumPy + torch only. ``pipeline`` is the TARGET
(``tests/pipelines/vision_changes.py:pipeline``); ``decode_calls`` counts
decodes in this process (the prefix-cache tests read it).
"""

from __future__ import annotations

import io
import math
import random
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageEnhance

WIDTH, HEIGHT = 768, 576
IMAGES = 64
BATCH_SIZE = 16
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

decode_calls = 0


def paint(index: int, width: int = WIDTH, height: int = HEIGHT) -> bytes:
    """One photo-like JPEG: smooth colour gradients, a few discs and fine noise (seeded by
    ``index``)."""
    rng = np.random.default_rng(1000 + index)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.empty((height, width, 3), np.float32)
    for c in range(3):
        a, b, phase = rng.uniform(0.002, 0.02, 2).tolist() + [rng.uniform(0, 6.28)]
        image[..., c] = 128 + 90 * np.sin(a * x + b * y + phase)
    for _ in range(6):
        cx, cy, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(20, 120)
        mask = (x - cx) ** 2 + (y - cy) ** 2 < r * r
        image[mask] = rng.uniform(0, 255, 3)
    image += rng.normal(0, 12, image.shape).astype(np.float32)
    buffer = io.BytesIO()
    Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def decode(data: bytes) -> Image.Image:
    global decode_calls
    decode_calls += 1
    image = Image.open(io.BytesIO(data))
    return image.convert("RGB")


class Compose:
    def __init__(self, transforms: list) -> None:
        self.transforms = list(transforms)

    def __call__(self, value: Any) -> Any:
        for transform in self.transforms:
            value = transform(value)
        return value


class RandomResizedCrop:
    def __init__(self, size: int, scale: tuple[float, float] = (0.08, 1.0)) -> None:
        self.size, self.scale = size, scale

    def __call__(self, image: Image.Image) -> Image.Image:
        width, height = image.size
        for _ in range(10):
            area = width * height * random.uniform(*self.scale)
            aspect = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            w, h = int(round(math.sqrt(area * aspect))), int(round(math.sqrt(area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                left, top = random.randint(0, width - w), random.randint(0, height - h)
                box = (left, top, left + w, top + h)
                break
        else:
            side = min(width, height)
            box = (
                (width - side) // 2,
                (height - side) // 2,
                (width + side) // 2,
                (height + side) // 2,
            )
        return image.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, image: Image.Image) -> Image.Image:
        return (
            image.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if random.random() < self.p else image
        )


class ColorJitter:
    def __init__(
        self, brightness: float = 0.4, contrast: float = 0.4, saturation: float = 0.4
    ) -> None:
        self.amounts = (brightness, contrast, saturation)

    def __call__(self, image: Image.Image) -> Image.Image:
        for enhancer, amount in zip(
            (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color), self.amounts
        ):
            image = enhancer(image).enhance(random.uniform(1 - amount, 1 + amount))
        return image


class ToTensor:
    def __call__(self, image: Image.Image) -> torch.Tensor:
        array = np.asarray(image, dtype=np.uint8)
        return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous().float().div_(255.0)


class Normalize:
    def __init__(self, mean: tuple = MEAN, std: tuple = STD) -> None:
        self.mean, self.std = mean, std

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        mean = torch.tensor(self.mean, dtype=tensor.dtype).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=tensor.dtype).view(-1, 1, 1)
        return tensor.sub(mean).div(std)


def train_transforms() -> Compose:
    return Compose(
        [
            RandomResizedCrop(224),
            RandomHorizontalFlip(),
            ColorJitter(0.4, 0.4, 0.4),
            ToTensor(),
            Normalize(),
        ]
    )


class JpegDataset:
    """Map-style: index -> (normalised float image, label), decoding a JPEG held in memory."""

    def __init__(self, images: int = IMAGES, transform: Any = None) -> None:
        self.blobs = [paint(i) for i in range(images)]
        self.labels = [i % 10 for i in range(images)]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = decode(self.blobs[index])
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[index]


def dataset(images: int = IMAGES) -> JpegDataset:
    return JpegDataset(images, transform=train_transforms())


def pipeline() -> dict[str, Any]:
    return {"dataset": dataset(), "batch_size": BATCH_SIZE}


def small_pipeline() -> dict[str, Any]:
    """Fewer images, for short end-to-end runs."""
    return {"dataset": dataset(32), "batch_size": 8}
