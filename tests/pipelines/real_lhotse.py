"""lhotse's way to load speech: a ``CutSet`` of recordings, a ``DynamicBucketingSampler`` that
yields CutSets by total duration, and a dataset whose ``__getitem__`` takes the CutSet (the
DataLoader has ``batch_size=None``: the sampler makes the batches, the dataset loads them).

TARGET: ``tests/pipelines/real_lhotse.py:make_loader`` (the factory takes ``num_workers``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from _datadir import cached_dir
from lhotse import CutSet, Recording, RecordingSet
from lhotse.dataset import DynamicBucketingSampler
from lhotse.dataset.collation import collate_audio

UTTERANCES = 96
RATE = 16000


def _write(folder: Path) -> None:
    rng = np.random.default_rng(0)
    for i in range(UTTERANCES):
        seconds = rng.uniform(0.5, 3.0)
        audio = rng.normal(0, 0.1, int(RATE * seconds)).astype(np.float32)
        sf.write(folder / f"utt{i}.wav", audio, RATE)


def _cuts() -> CutSet:
    folder = cached_dir("lhotse-v1", _write)
    recordings = [
        Recording.from_file(folder / f"utt{i}.wav", recording_id=f"utt{i}")
        for i in range(UTTERANCES)
    ]
    return CutSet.from_manifests(recordings=RecordingSet.from_recordings(recordings))


class LogPowerFrames(torch.utils.data.Dataset):
    """Loads a batch of cuts (what the sampler yields), pads them, and frames them to log power."""

    def __getitem__(self, cuts: CutSet) -> dict[str, torch.Tensor]:
        audio, lens = collate_audio(cuts)
        frames = audio.unfold(1, 400, 160)
        power = torch.fft.rfft(frames * torch.hann_window(400)).abs().pow(2)
        return {"features": torch.log(power + 1e-6), "lens": lens}


def make_loader(num_workers: int = 0) -> torch.utils.data.DataLoader:
    with warnings.catch_warnings():  # an eagerly read CutSet: fine at this size
        warnings.simplefilter("ignore")
        sampler = DynamicBucketingSampler(_cuts(), max_duration=20.0, shuffle=True, num_buckets=2)
    return torch.utils.data.DataLoader(
        LogPowerFrames(), sampler=sampler, batch_size=None, num_workers=num_workers
    )
