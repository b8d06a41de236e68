"""A text-to-speech loader shaped like Tacotron 2's: WAV files, a mel spectrogram, padding.

Utterances of 0.5 to 2.5 s are WAV files (16-bit PCM, written and read with the
standard ``wave`` module) listed in a ``path|text`` metadata file. ``__getitem__``
reads one, computes an STFT with ``torch.stft`` and projects it on a triangular mel
filterbank built once in ``__init__``; the text becomes character ids. The collate
pads spectrograms and texts to the longest in the batch. The loader shuffles and
drops the last incomplete batch.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import torch
from _datadir import cached_dir
from torch.utils.data import DataLoader, Dataset

RATE = 22050
CLIPS = 64
N_FFT, HOP, WIN, N_MELS = 1024, 256, 1024, 80
ALPHABET = "_ abcdefghijklmnopqrstuvwxyz.,?"
WORDS = (
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "speech",
    "sounds",
    "clear",
)


def _generate(folder: Path) -> None:
    rng = np.random.default_rng(99)
    lines = []
    for i in range(CLIPS):
        seconds = float(rng.uniform(0.5, 2.5))
        t = np.arange(int(seconds * RATE)) / RATE
        pitch = rng.uniform(90, 260)
        signal = sum(np.sin(2 * np.pi * pitch * k * t) / k for k in range(1, 5)) * np.hanning(
            len(t)
        )
        signal = 0.3 * signal + 0.01 * rng.standard_normal(len(t))
        pcm = (np.clip(signal, -1, 1) * 32767).astype("<i2")
        with wave.open(str(folder / f"clip{i:03d}.wav"), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(RATE)
            out.writeframes(pcm.tobytes())
        words = rng.choice(WORDS, size=int(rng.integers(2, 9)))
        lines.append(f"clip{i:03d}.wav|{' '.join(words)}.")
    (folder / "metadata.txt").write_text("\n".join(lines) + "\n")


def mel_filterbank(n_fft: int, n_mels: int, rate: int) -> np.ndarray:
    """Triangular filters evenly spaced on the mel scale, shape (n_mels, n_fft // 2 + 1)."""
    to_mel = lambda hz: 2595.0 * np.log10(1.0 + hz / 700.0)  # noqa: E731
    to_hz = lambda mel: 700.0 * (10 ** (mel / 2595.0) - 1.0)  # noqa: E731
    edges = to_hz(np.linspace(to_mel(0.0), to_mel(rate / 2), n_mels + 2))
    bins = np.linspace(0, rate / 2, n_fft // 2 + 1)
    bank = np.zeros((n_mels, len(bins)), dtype=np.float32)
    for m in range(n_mels):
        low, centre, high = edges[m], edges[m + 1], edges[m + 2]
        rising = (bins - low) / (centre - low)
        falling = (high - bins) / (high - centre)
        bank[m] = np.maximum(0.0, np.minimum(rising, falling))
    return bank


class TextMelDataset(Dataset):
    """(character ids, log-mel spectrogram) pairs computed from WAV files."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        rows = [
            line.split("|", 1)
            for line in (self.folder / "metadata.txt").read_text().splitlines()
            if line
        ]
        self.items = [(self.folder / name, text) for name, text in rows]
        self.mel_basis = torch.from_numpy(mel_filterbank(N_FFT, N_MELS, RATE))
        self.window = torch.hann_window(WIN)

    def __len__(self) -> int:
        return len(self.items)

    def text_ids(self, text: str) -> torch.Tensor:
        return torch.tensor(
            [ALPHABET.index(c) for c in text.lower() if c in ALPHABET], dtype=torch.int64
        )

    def mel(self, path: Path) -> torch.Tensor:
        with wave.open(str(path), "rb") as clip:
            if clip.getframerate() != RATE:
                raise ValueError(f"{path}: {clip.getframerate()} Hz, expected {RATE}")
            pcm = np.frombuffer(clip.readframes(clip.getnframes()), dtype="<i2")
        audio = torch.from_numpy(pcm.astype(np.float32) / 32768.0)
        spec = torch.stft(
            audio, N_FFT, hop_length=HOP, win_length=WIN, window=self.window, return_complex=True
        )
        return torch.log(torch.clamp(self.mel_basis @ spec.abs(), min=1e-5))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        path, text = self.items[index]
        return self.text_ids(text), self.mel(path)


class TextMelCollate:
    """Pads texts and spectrograms to the longest of the batch, longest text first."""

    def __call__(
        self, batch: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch = sorted(batch, key=lambda pair: len(pair[0]), reverse=True)
        texts = torch.zeros(len(batch), max(len(t) for t, _ in batch), dtype=torch.int64)
        frames = max(m.shape[1] for _, m in batch)
        specs = torch.zeros(len(batch), N_MELS, frames)
        lengths = torch.zeros(len(batch), dtype=torch.int64)
        for i, (text, mel) in enumerate(batch):
            texts[i, : len(text)] = text
            specs[i, :, : mel.shape[1]] = mel
            lengths[i] = mel.shape[1]
        return specs, lengths, texts


def make_dataset() -> TextMelDataset:
    return TextMelDataset(cached_dir("audio-v2", _generate))


def make_loader(num_workers: int = 2) -> DataLoader:
    """The user's loader (``num_workers`` only for tests that time it at other settings)."""
    return DataLoader(
        make_dataset(),
        batch_size=6,
        shuffle=True,
        drop_last=True,
        collate_fn=TextMelCollate(),
        num_workers=num_workers,
    )
