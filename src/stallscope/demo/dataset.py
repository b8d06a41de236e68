"""The demo dataset (SPEC §6): an ImageFolder-like dataset over the cached photo-like JPEGs, read,
decoded with Pillow and augmented the way an ImageNet-style training run does.

``stallscope doctor`` with no target measures :func:`pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

from .cache import build_demo_dataset
from .transforms import train_transforms

BATCH_SIZE = 32


def load_image(path: str) -> Image.Image:
    """Read and decode one file the way torchvision's ``pil_loader`` does."""
    with open(path, "rb") as handle:
        image = Image.open(handle)
        return image.convert("RGB")


class DemoImageFolder:
    """An ImageFolder-like map-style dataset: ``root/<class>/<file>.jpg`` -> (tensor, label)."""

    def __init__(self, root: str | Path, transform: Callable[[Any], Any] | None = None) -> None:
        self.root = str(root)
        folder = Path(root)
        self.classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
        self.class_to_idx = {name: index for index, name in enumerate(self.classes)}
        self.samples = [
            (str(path), self.class_to_idx[name])
            for name in self.classes
            for path in sorted((folder / name).glob("*.jpg"))
        ]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, label = self.samples[index]
        image = load_image(path)
        if self.transform is not None:
            image = self.transform(image)
        return image, label

    def __repr__(self) -> str:
        return f"DemoImageFolder({self.root!r}, {len(self)} images, {len(self.classes)} classes)"


def dataset(root: str | Path | None = None) -> DemoImageFolder:
    """The demo dataset with its training transforms, building the images if needed."""
    build = build_demo_dataset(root)
    return DemoImageFolder(build.path, transform=train_transforms())


def pipeline() -> dict[str, Any]:
    """TARGET ``stallscope.demo:pipeline``: the demo dataset and its batch size."""
    return {"dataset": dataset(), "batch_size": BATCH_SIZE}
