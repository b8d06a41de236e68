"""Torchvision-style transforms, Pillow + NumPy only (no torchvision): RandomResizedCrop,
RandomHorizontalFlip, ColorJitter, ToTensor, Normalize, composed by :class:`Compose`, whose
``.transforms`` list ``stallscope stages`` times one by one. Random draws use Python's ``random``
module, which DataLoader reseeds in every worker, so workers never repeat each other's
augmentations.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from PIL import Image, ImageEnhance

CROP_SIZE = 224

# ImageNet channel statistics, as most vision pipelines normalise with them.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class Compose:
    """Apply ``transforms`` in order; ``.transforms`` is the list stallscope times one by one."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, value: Any) -> Any:
        for transform in self.transforms:
            value = transform(value)
        return value

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose([{inner}])"


class RandomResizedCrop:
    """Crop a random area fraction and aspect ratio, then resize to ``size``×``size``."""

    def __init__(
        self,
        size: int,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
    ) -> None:
        self.size = size
        self.scale = scale
        self.ratio = ratio

    def box(self, width: int, height: int) -> tuple[int, int, int, int]:
        area = width * height
        log_low, log_high = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            target = area * random.uniform(*self.scale)
            aspect = math.exp(random.uniform(log_low, log_high))
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                left = random.randint(0, width - w)
                top = random.randint(0, height - h)
                return left, top, left + w, top + h
        side = min(width, height)  # fallback: the central square
        left, top = (width - side) // 2, (height - side) // 2
        return left, top, left + side, top + side

    def __call__(self, image: Image.Image) -> Image.Image:
        box = self.box(*image.size)
        return image.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)

    def __repr__(self) -> str:
        return f"RandomResizedCrop(size={self.size}, scale={self.scale})"


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, image: Image.Image) -> Image.Image:
        if random.random() < self.p:
            return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return image

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class ColorJitter:
    """Random brightness, contrast, saturation (Pillow enhancers) and hue (HSV shift), in random
    order."""

    def __init__(
        self,
        brightness: float = 0.4,
        contrast: float = 0.4,
        saturation: float = 0.4,
        hue: float = 0.1,
    ) -> None:
        self.brightness = brightness
        self.contrast = contrast
        self.saturation = saturation
        self.hue = hue

    def __call__(self, image: Image.Image) -> Image.Image:
        steps: list[Callable[[Image.Image], Image.Image]] = []
        if self.brightness:
            steps.append(
                lambda im: ImageEnhance.Brightness(im).enhance(self._factor(self.brightness))
            )
        if self.contrast:
            steps.append(lambda im: ImageEnhance.Contrast(im).enhance(self._factor(self.contrast)))
        if self.saturation:
            steps.append(lambda im: ImageEnhance.Color(im).enhance(self._factor(self.saturation)))
        if self.hue:
            steps.append(self._shift_hue)
        random.shuffle(steps)
        for step in steps:
            image = step(image)
        return image

    @staticmethod
    def _factor(amount: float) -> float:
        return random.uniform(max(0.0, 1 - amount), 1 + amount)

    def _shift_hue(self, image: Image.Image) -> Image.Image:
        shift = int(round(random.uniform(-self.hue, self.hue) * 255))
        hsv = np.array(image.convert("HSV"))
        hsv[..., 0] = (hsv[..., 0].astype(np.int16) + shift).astype(np.uint8)  # hue wraps around
        return Image.fromarray(hsv, "HSV").convert("RGB")

    def __repr__(self) -> str:
        return (
            f"ColorJitter(brightness={self.brightness}, contrast={self.contrast}, "
            f"saturation={self.saturation}, hue={self.hue})"
        )


class ToTensor:
    """HWC uint8 image -> CHW float32 tensor in [0, 1]."""

    def __call__(self, image: Image.Image) -> Any:
        import torch

        array = np.asarray(image, dtype=np.uint8)
        return (
            torch.from_numpy(array.copy())
            .permute(2, 0, 1)
            .contiguous()
            .to(torch.float32)
            .div_(255.0)
        )

    def __repr__(self) -> str:
        return "ToTensor()"


class Normalize:
    """Per-channel ``(x - mean) / std`` on a CHW tensor."""

    def __init__(self, mean: Sequence[float] = MEAN, std: Sequence[float] = STD) -> None:
        self.mean = tuple(mean)
        self.std = tuple(std)

    def __call__(self, tensor: Any) -> Any:
        import torch

        mean = torch.tensor(self.mean, dtype=tensor.dtype).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=tensor.dtype).view(-1, 1, 1)
        return tensor.sub_(mean).div_(std)

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


def train_transforms(size: int = CROP_SIZE) -> Compose:
    """The augmentation pipeline of a typical ImageNet-style training run."""
    return Compose(
        [
            RandomResizedCrop(size),
            RandomHorizontalFlip(),
            # Brightness/contrast/saturation as in timm's default recipe; a hue shift
            # (HSV round trip) would double the per-sample cost.
            ColorJitter(0.4, 0.4, 0.4, hue=0.0),
            ToTensor(),
            Normalize(),
        ]
    )
