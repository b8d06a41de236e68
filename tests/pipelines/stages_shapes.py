"""Small pipelines for the stage tests: duck-typed transform containers and known calls.

Module-level classes only, so spawned workers can import them.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, IterableDataset


class Compose:
    """torchvision-style: positional call, ``.transforms``."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, value):
        for transform in self.transforms:
            value = transform(value)
        return value


class Normalize:
    def __call__(self, x):
        return x


class RandomCrop:
    def __call__(self, x):
        return x


class ColorJitter:
    def __call__(self, x):
        return x


class AlbuTransform:
    """albumentations-style: keyword call returning a dict, probability ``p``."""

    def __init__(self, p: float = 1.0, seconds: float = 0.0, add: int = 1) -> None:
        self.p = p
        self.seconds = seconds
        self.add = add

    def __call__(self, *, image, **rest):
        if self.seconds:
            time.sleep(self.seconds)
        return {"image": image + self.add, **rest}


class HorizontalFlip(AlbuTransform):
    pass


class Resize(AlbuTransform):
    pass


class AlbuCompose:
    """albumentations-style Compose: checks its transforms' types, calls them with keywords."""

    def __init__(self, transforms, p: float = 1.0) -> None:
        self.transforms = list(transforms)
        self.p = p

    def __call__(self, **data):
        for transform in self.transforms:
            if not isinstance(transform, AlbuTransform):
                raise TypeError(f"{type(transform).__name__} is not an AlbuTransform")
            data = transform(**data)
        return data


def add_one(x):
    return x + 1


def scale(x, factor=2):
    return x * factor


class ListDataset(Dataset):
    """A plain list of callables under ``augmentations``."""

    def __init__(self, augmentations, length: int = 16) -> None:
        self.augmentations = augmentations
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        x = torch.zeros(4)
        for fn in self.augmentations:
            x = fn(x)
        return x


class AlbuDataset(Dataset):
    def __init__(self, transform, length: int = 16) -> None:
        self.transform = transform
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return self.transform(image=np.zeros((4, 4), dtype=np.float32))["image"]


class RandomFlipMarked:
    """A random transform of a dict pipeline (OpenMMLab's style) that records what it drew."""

    def __call__(self, results):
        results["flip"] = bool(torch.rand(()) < 0.5)
        return results


class PackMarked:
    """Reads the key the random transform set, as a packing step reads ``flip``."""

    def __call__(self, results):
        return results["x"] * (-1.0 if results["flip"] else 1.0)


class DictPipelineDataset(Dataset):
    def __init__(self, length: int = 32) -> None:
        self.pipeline = Compose([RandomFlipMarked(), PackMarked()])
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return self.pipeline({"x": torch.full((4,), float(index))})


class TorchvisionLikeDataset(Dataset):
    def __init__(self, transform, target_transform=None, length: int = 16) -> None:
        self.transform = transform
        self.target_transform = target_transform
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        x = self.transform(torch.zeros(4))
        y = self.target_transform(index) if self.target_transform else index
        return x, y


class StreamDataset(IterableDataset):
    """An iterable dataset with a transform: 2 ms per item."""

    def __init__(self, count: int = 64, transform=None) -> None:
        self.count = count
        self.transform = transform

    def __iter__(self):
        for index in range(self.count):
            time.sleep(0.002)
            x = torch.full((4,), float(index))
            yield self.transform(x) if self.transform else x


class PillowFolder(Dataset):
    """Reads images the two common ways: ``Image.open(path)`` and ``Image.open(file)``."""

    def __init__(self, paths, transform=None, by_path: bool = True) -> None:
        self.paths = [str(p) for p in paths]
        self.transform = transform
        self.by_path = by_path

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        if self.by_path:
            image = Image.open(self.paths[index]).convert("RGB")
        else:
            with open(self.paths[index], "rb") as handle:
                image = Image.open(handle).convert("RGB")
        if self.transform is not None:
            image = self.transform(image)
        return torch.from_numpy(np.asarray(image, dtype=np.uint8).copy())


class ToSmall:
    def __call__(self, image):
        return image.resize((32, 32))


class NumpyFiles(Dataset):
    def __init__(self, paths) -> None:
        self.paths = [str(p) for p in paths]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        return torch.from_numpy(np.load(self.paths[index]))


def write_jpegs(folder: Path, count: int = 12, size: int = 96) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for index in range(count):
        path = folder / f"img_{index:02d}.jpg"
        Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(
            path, quality=90
        )
        paths.append(path)
    return paths


def partial_scale():
    return functools.partial(scale, factor=3)


class Delegating(Dataset):
    """Forwards unknown attributes to ``inner``: copy.copy of it recurses forever."""

    def __init__(self, inner, transform) -> None:
        self.inner = inner
        self.transform = transform

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        return self.transform(self.inner[index])


class BatchedFetch(Dataset):
    """Has ``__getitems__``: the DataLoader fetches a whole batch in one call."""

    def __init__(self, length: int = 32) -> None:
        self.length = length
        self.calls = 0

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return torch.full((2,), float(index))

    def __getitems__(self, indices):
        time.sleep(0.004)
        return [torch.full((2,), float(i)) for i in indices]
