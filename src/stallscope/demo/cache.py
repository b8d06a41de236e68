"""The demo image folder, built once and cached under ``$STALLSCOPE_CACHE/demo-v1`` (default
``~/.cache/stallscope/demo-v1``).

NOTE [demo cache]
A build writes into a private ``demo-v1.building-<pid>`` folder, writes the
``COMPLETE`` marker last, then renames the folder into place. A build that is
interrupted therefore never leaves a folder that looks finished: without the
marker (or with a marker from another generator version) the folder is built
again. Two processes building at once each build privately; the first rename
wins and the other discards its copy.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..runtime.host import cache_root
from .scenes import CLASSES, DEMO_SEED, GENERATOR, render_scene

# Bump when the generator changes: a cache built by another version is rebuilt.
DEMO_VERSION = 1
IMAGES_PER_CLASS = 40
MARKER = "COMPLETE"


def demo_dir(root: str | Path | None = None) -> Path:
    return cache_root(root) / f"demo-v{DEMO_VERSION}"


@dataclass
class DemoBuild:
    """Where the demo images are, and whether this call had to generate them."""

    path: Path
    images: int
    classes: list[str]
    built: bool
    seconds: float
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = str(self.path)
        return data


def _expected_marker(images_per_class: int) -> dict[str, Any]:
    return {
        "version": DEMO_VERSION,
        "seed": DEMO_SEED,
        "classes": list(CLASSES),
        "images_per_class": images_per_class,
        "generator": GENERATOR,
    }


def _read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        marker: dict[str, Any] = json.loads((folder / MARKER).read_text())
        return marker
    except (OSError, ValueError):
        return None


def is_complete(folder: Path, images_per_class: int | None = None) -> bool:
    """True when ``folder`` holds a finished build of this generator version."""
    marker = _read_marker(folder)
    if marker is None:
        return False
    expected = _expected_marker(images_per_class or IMAGES_PER_CLASS)
    return all(marker.get(key) == value for key, value in expected.items())


def build_demo_dataset(
    root: str | Path | None = None,
    *,
    force: bool = False,
    images_per_class: int | None = None,
) -> DemoBuild:
    """Generate the demo image folder once; later calls find the marker and return at once.

    ``root`` defaults to :func:`cache_root`; ``images_per_class`` to ``IMAGES_PER_CLASS``
    (tests build smaller sets). See NOTE [demo cache].
    """
    count = images_per_class or IMAGES_PER_CLASS
    final = demo_dir(root)
    start = time.perf_counter()
    if is_complete(final, count) and not force:
        return _summary(final, built=False, seconds=time.perf_counter() - start)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_builds(final)
    staging = final.with_name(f"{final.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _generate_into(staging, count)
        (staging / MARKER).write_text(
            json.dumps({**_expected_marker(count), "built_at": time.time()})
        )
        _move_into_place(staging, final, count, force=force)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _summary(final, built=True, seconds=time.perf_counter() - start)


def _remove_abandoned_builds(final: Path) -> None:
    """Delete staging folders of builds whose process no longer exists (interrupted)."""
    for folder in final.parent.glob(f"{final.name}.building-*"):
        pid_text = folder.name.rsplit("-", 1)[-1]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and _pid_alive(int(pid_text)):
            continue
        shutil.rmtree(folder, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _move_into_place(staging: Path, final: Path, count: int, *, force: bool) -> None:
    if final.exists() and (force or not is_complete(final, count)):
        # An unfinished or outdated folder: replace it.
        shutil.rmtree(final, ignore_errors=True)
    try:
        os.rename(staging, final)
    except OSError:
        if not is_complete(final, count):
            raise
        # Another process finished first; its copy is identical (same seed).


def _summary(folder: Path, *, built: bool, seconds: float) -> DemoBuild:
    files = sorted(folder.glob("*/*.jpg"))
    return DemoBuild(
        path=folder,
        images=len(files),
        classes=sorted(p.name for p in folder.iterdir() if p.is_dir()),
        built=built,
        seconds=seconds,
        bytes=sum(f.stat().st_size for f in files),
    )


def _generate_into(folder: Path, images_per_class: int) -> None:
    for class_index, name in enumerate(CLASSES):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for number in range(images_per_class):
            rng = np.random.default_rng([DEMO_SEED, class_index, number])
            image = render_scene(name, rng)
            quality = int(rng.integers(82, 95))
            image.save(folder / name / f"{name}_{number:03d}.jpg", format="JPEG", quality=quality)
