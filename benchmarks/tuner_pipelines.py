"""The five pipeline kinds of ``tuner_vs_grid.py`` (module-level classes: importable by workers).

* ``cpu``      — JPEG decode (Pillow) + random crop/flip + normalise: CPU-bound.
* ``latency``  — 20 ms wait per item (an object-store GET) + a small decode: latency-bound,
                 dozens of workers win on 2 cores.
* ``jittery``  — ~1 ms of CPU per item, and 5% of items stall 100 ms (a slow replica):
                 head-of-line blocking with in-order delivery.
* ``tiny``     — in-memory tensors (TensorDataset): per-item overhead and IPC dominate.
* ``collate``  — variable-length token sequences, padded + masked in the collate.
"""

from __future__ import annotations

import io
import time
import zlib

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset, TensorDataset

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _photo(rng: np.random.Generator, size: int) -> np.ndarray:
    """A smooth gradient with blobs and noise: compresses like a photograph, not like noise."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    image = np.stack([x, y, (x + y) / 2], axis=-1) * rng.uniform(80, 200, size=3)
    for _ in range(6):
        cx, cy, r = rng.uniform(0, 1, 2).tolist() + [rng.uniform(0.05, 0.25)]
        mask = ((x - cx) ** 2 + (y - cy) ** 2) < r * r
        image[mask] = rng.uniform(0, 255, size=3)
    image += rng.normal(0, 6, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


class JpegDataset(Dataset):
    """Decode + augment from in-memory JPEG bytes (no disk: the CPU cost is the point)."""

    def __init__(
        self, n: int = 1024, size: int = 192, crop: int = 160, unique: int = 96, seed: int = 0
    ) -> None:
        from PIL import Image

        rng = np.random.default_rng(seed)
        self.n = n
        self.crop = crop
        self.blobs = []
        for _ in range(
            unique
        ):  # items cycle over these: decoding costs the same, building is quicker
            buffer = io.BytesIO()
            Image.fromarray(_photo(rng, size)).save(buffer, format="JPEG", quality=90)
            self.blobs.append(buffer.getvalue())

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        blob = self.blobs[index % len(self.blobs)]
        image = np.asarray(Image.open(io.BytesIO(blob)).convert("RGB"), dtype=np.float32) / 255.0
        h, w, _ = image.shape
        top, left = np.random.randint(0, h - self.crop + 1), np.random.randint(0, w - self.crop + 1)
        image = image[top : top + self.crop, left : left + self.crop]
        if np.random.rand() < 0.5:
            image = image[:, ::-1]
        image = (image - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))), index % 10


class RemoteDataset(Dataset):
    """Each item waits ``wait_s`` (a remote GET), then decodes a small payload."""

    def __init__(self, n: int = 4096, wait_s: float = 0.02, payload: int = 4096) -> None:
        self.n = n
        self.wait_s = wait_s
        self.payload = np.random.default_rng(1).integers(0, 255, payload, dtype=np.uint8).tobytes()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.wait_s)
        data = np.frombuffer(self.payload, dtype=np.uint8).astype(np.float32) / 255.0
        return torch.from_numpy(data[:1024].copy()), index % 10


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class JitteryDataset(Dataset):
    """~``cpu_s`` of CPU per item; a fixed ``spike_p`` share of indices stalls ``spike_s``
    (waiting)."""

    def __init__(
        self, n: int = 2048, cpu_s: float = 0.001, spike_s: float = 0.1, spike_p: float = 0.05
    ) -> None:
        self.n = n
        self.cpu_s = cpu_s
        self.spike_s = spike_s
        self.spike_p = spike_p

    def __len__(self) -> int:
        return self.n

    def slow(self, index: int) -> bool:
        # Deterministic per index, so every config sees the same spikes.
        return (zlib.crc32(index.to_bytes(4, "little")) % 10_000) < self.spike_p * 10_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        _busy(self.cpu_s)
        if self.slow(index):
            time.sleep(self.spike_s)
        return torch.full((64,), float(index)), index % 10


class SequenceDataset(Dataset):
    """Token sequences of 32..1024 tokens, kept in memory; the collate pads them."""

    def __init__(self, n: int = 4096, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        lengths = rng.integers(32, 1024, n)
        self.sequences = [torch.from_numpy(rng.integers(1, 30_000, int(k))) for k in lengths]

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.sequences[index], index % 2


def pad_collate(batch: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    """Sort by length, pad, build the attention mask and positions (a typical NLP collate)."""
    batch = sorted(batch, key=lambda item: -len(item[0]))
    tokens = pad_sequence([seq for seq, _ in batch], batch_first=True)
    lengths = torch.tensor([len(seq) for seq, _ in batch])
    mask = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
    positions = torch.cumsum(mask, dim=1) * mask
    return {
        "tokens": tokens,
        "mask": mask,
        "positions": positions,
        "lengths": lengths,
        "labels": torch.tensor([label for _, label in batch]),
    }


def cpu() -> dict:
    return {"dataset": JpegDataset(), "batch_size": 32}


def latency() -> dict:
    return {"dataset": RemoteDataset(), "batch_size": 16}


def jittery() -> dict:
    return {"dataset": JitteryDataset(), "batch_size": 16}


def tiny() -> dict:
    return {
        "dataset": TensorDataset(torch.randn(65_536, 32), torch.randint(0, 10, (65_536,))),
        "batch_size": 256,
    }


def collate() -> dict:
    return {"dataset": SequenceDataset(), "batch_size": 64, "collate_fn": pad_collate}


KINDS = {
    "cpu": (cpu, "CPU-bound: JPEG decode + random crop/flip + normalise"),
    "latency": (latency, "latency-bound: 20 ms wait per item (remote GET)"),
    "jittery": (jittery, "jittery: 1 ms CPU per item, 5% of items stall 100 ms"),
    "tiny": (tiny, "tiny in-memory tensors (TensorDataset)"),
    "collate": (collate, "collate-heavy: variable-length sequences, pad + mask"),
}
