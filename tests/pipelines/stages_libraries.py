"""Small datasets that read and decode through library calls stallscope recognises
(OpenCV, wave, scipy.io.wavfile, numpy.fromfile, memory maps), and one whose
``__getitem__`` spends its time in functions it calls (the rows broken out of ``other``).

Module-level classes only, so spawned workers can import them. ``write_*`` helpers make
the files in a folder the test gives.
"""

from __future__ import annotations

import time
import wave
from pathlib import Path

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset

RATE = 8000


def write_images(folder: Path, count: int = 8, size: int = 64) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    paths = []
    for index in range(count):
        path = folder / f"img{index}.{'png' if index % 2 else 'jpg'}"
        cv2.imwrite(str(path), rng.integers(0, 255, (size, size, 3), dtype=np.uint8))
        paths.append(str(path))
    return paths


def write_wavs(folder: Path, count: int = 6, seconds: float = 0.25) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(4)
    paths = []
    for index in range(count):
        path = folder / f"clip{index}.wav"
        pcm = (rng.standard_normal(int(RATE * seconds)) * 3000).astype("<i2")
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(RATE)
            out.writeframes(pcm.tobytes())
        paths.append(str(path))
    return paths


class OpenCVImages(Dataset):
    """``cv2.imread`` (read + decode) or ``cv2.imdecode`` of bytes read by hand, then a resize."""

    def __init__(self, paths: list[str], imdecode: bool = False) -> None:
        self.paths = paths
        self.imdecode = imdecode

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.imdecode:
            with open(self.paths[index], "rb") as handle:
                data = np.frombuffer(handle.read(), dtype=np.uint8)
            image = cv2.imdecode(data, cv2.IMREAD_COLOR)
        else:
            image = cv2.imread(self.paths[index])
        return torch.from_numpy(cv2.resize(image, (32, 32)))


class WaveClips(Dataset):
    """The standard ``wave`` module (``wave.open`` + ``readframes``), or
    ``scipy.io.wavfile.read``."""

    def __init__(self, paths: list[str], reader: str = "wave") -> None:
        self.paths = paths
        self.reader = reader

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.reader == "scipy":
            from scipy.io import wavfile

            _, pcm = wavfile.read(self.paths[index])
        else:
            with wave.open(self.paths[index], "rb") as clip:
                pcm = np.frombuffer(clip.readframes(clip.getnframes()), dtype="<i2")
        return torch.from_numpy(pcm.astype(np.float32) / 32768.0)[: RATE // 8]


class RawArrays(Dataset):
    """Fixed-size records read with ``numpy.fromfile`` or sliced out of a ``numpy.memmap``."""

    def __init__(self, path: str, records: int, width: int, how: str = "fromfile") -> None:
        self.path, self.records, self.width, self.how = path, records, width, how

    def __len__(self) -> int:
        return self.records

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.how == "fromfile":
            row = np.fromfile(
                self.path, dtype=np.float32, count=self.width, offset=index * self.width * 4
            )
        elif self.how == "np.load":
            row = np.array(np.load(self.path, mmap_mode="r")[index])
        else:
            data = np.memmap(
                self.path, dtype=np.float32, mode="r", shape=(self.records, self.width)
            )
            row = np.array(data[index])
        return torch.from_numpy(row)


def spectrum(x: torch.Tensor) -> torch.Tensor:
    """A module-level helper with a known cost."""
    time.sleep(0.003)
    return torch.fft.rfft(x).abs()


class Helpers(Dataset):
    """``__getitem__`` calls a method (4 ms), a module function (3 ms) and ``time.sleep``
    directly (2 ms), plus a cheap ``torch.zeros``; nothing is marked."""

    def __init__(self, length: int = 32) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def load(self, index: int) -> torch.Tensor:
        time.sleep(0.004)
        return torch.full((64,), float(index))

    def __getitem__(self, index: int) -> torch.Tensor:
        x = self.load(index)
        y = spectrum(x)
        time.sleep(0.002)
        return torch.cat([y, torch.zeros(1)])


class Wrapped(Dataset):
    """A wrapper dataset: indexes another one, then does work of its own (a 3 ms sleep)."""

    def __init__(self, base: Dataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> torch.Tensor:
        x = self.base[index]
        time.sleep(0.003)
        return x
