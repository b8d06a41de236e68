"""Objects around DataLoaders shaped like the ones training libraries hand out, none of them a
plain DataLoader or a subclass of one, plus a one-shot generator of batches.

* :func:`proxy_loader` — an adapter that *claims* to be a DataLoader (``__class__`` is a property
  returning the class of the loader it holds, as device-placement adapters do), delegates every
  attribute to it and moves each batch into a ``FeatureBatch`` dataclass. Setting ``num_workers``
  on the adapter changes nothing: only the loader inside runs.
* :func:`multitask_loader` — named loaders in a dict, iterated round-robin through a flat list
  built in the constructor (as multi-task and combined loaders do): replacing a loader in the dict
  changes nothing, replacing it in the list does.
* :func:`frozen_copy_loader` — holds ``.loader`` for show but iterates a private copy made in its
  constructor: no loader inside it can be swapped, so it is measured as it is.
* :func:`wave_batches` — a function returning a generator of dict-of-NumPy batches: each pass
  needs a fresh generator, made by calling the function again.
* :func:`accelerate_loader` / :func:`lightning_combined` — the real libraries' own: accelerate's
  prepared loader and Lightning's ``CombinedLoader``; :func:`accelerate_factory` and
  :func:`lightning_factory` build the same from factories taking ``num_workers``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Chirps(Dataset):
    """A synthetic chirp per index, framed and windowed into a log-power spectrogram (NumPy FFT):
    a millisecond or two of CPU per item."""

    def __init__(self, size: int = 192, samples: int = 8000) -> None:
        self.size = size
        self.samples = samples

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        t = np.arange(self.samples) / 8000.0
        wave = np.sin(2 * math.pi * (200 + 40 * (index % 17)) * t * (1 + t)).astype(np.float32)
        frames = np.lib.stride_tricks.sliding_window_view(wave, 256)[::128] * np.hanning(256)
        power = np.log1p(np.abs(np.fft.rfft(frames, axis=1)) ** 2).astype(np.float32)
        return power, index % 5


@dataclass
class FeatureBatch:
    features: torch.Tensor
    target: torch.Tensor


class ProxyLoader:
    """Holds a DataLoader and passes for one: ``isinstance(proxy, DataLoader)`` is True, attributes
    are read from the loader inside, and batches come out as :class:`FeatureBatch`."""

    def __init__(self, loader: DataLoader) -> None:
        self.inner_loader = loader

    @property
    def __class__(self):  # noqa: D401 - the adapter's disguise
        return self.inner_loader.__class__

    def __getattr__(self, name: str):
        if name == "inner_loader":
            raise AttributeError(name)
        return getattr(self.inner_loader, name)

    def __len__(self) -> int:
        return len(self.inner_loader)

    def __iter__(self):
        for features, target in self.inner_loader:
            yield FeatureBatch(features.unsqueeze(1), target)


def proxy_loader() -> ProxyLoader:
    return ProxyLoader(DataLoader(Chirps(), batch_size=12, shuffle=True, num_workers=0))


class MultiTaskLoader:
    """Named loaders, one batch of each in turn, until the longest is done (the others restart)."""

    def __init__(self, loaders: dict[str, DataLoader]) -> None:
        self.loaders = loaders
        self._order = list(loaders)
        self._flat = [loaders[name] for name in self._order]

    def __iter__(self):
        iterators = [iter(loader) for loader in self._flat]
        longest = max(len(loader) for loader in self._flat)
        for _ in range(longest):
            for i, name in enumerate(self._order):
                try:
                    batch = next(iterators[i])
                except StopIteration:
                    iterators[i] = iter(self._flat[i])
                    batch = next(iterators[i])
                yield {"task": name, "batch": batch}


def multitask_loader() -> MultiTaskLoader:
    return MultiTaskLoader(
        {
            "chirps": DataLoader(Chirps(), batch_size=8, num_workers=0),
            "short": DataLoader(Chirps(64, samples=4000), batch_size=8, num_workers=0),
        }
    )


class FrozenCopyLoader:
    """Shows ``.loader`` but iterates a copy taken when it was built."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        frozen = copy.copy(loader)
        self._batches = lambda: iter(frozen)

    def __iter__(self):
        yield from self._batches()


def frozen_copy_loader() -> FrozenCopyLoader:
    return FrozenCopyLoader(DataLoader(Chirps(96), batch_size=8, num_workers=0))


def wave_batches():
    """A generator: ready batches as dicts of NumPy arrays, used up by one pass."""
    dataset = Chirps(96)
    for start in range(0, len(dataset), 8):
        items = [dataset[i] for i in range(start, start + 8)]
        yield {"power": np.stack([p for p, _ in items]), "label": np.array([y for _, y in items])}


def accelerate_loader():
    """accelerate's own adapter: ``Accelerator.prepare`` returns a ``DataLoaderShard`` that passes
    for a DataLoader and iterates the one it built inside (``base_dataloader``)."""
    from accelerate import Accelerator

    return Accelerator(cpu=True).prepare(
        DataLoader(Chirps(), batch_size=12, shuffle=True, num_workers=0)
    )


def lightning_combined():
    """Lightning's ``CombinedLoader`` over two named loaders (it iterates a flat list made
    when built)."""
    from lightning.pytorch.utilities import CombinedLoader

    return CombinedLoader(
        {
            "chirps": DataLoader(Chirps(), batch_size=8),
            "short": DataLoader(Chirps(64, samples=4000), batch_size=8),
        },
        mode="max_size_cycle",
    )


def accelerate_factory(num_workers: int = 0):
    """:func:`accelerate_loader` from a factory taking ``num_workers``."""
    from accelerate import Accelerator

    return Accelerator(cpu=True).prepare(
        DataLoader(Chirps(), batch_size=12, shuffle=True, num_workers=num_workers)
    )


def lightning_factory(num_workers: int = 0):
    """:func:`lightning_combined` from a factory taking ``num_workers`` (both loaders get it)."""
    from lightning.pytorch.utilities import CombinedLoader

    return CombinedLoader(
        {
            "chirps": DataLoader(Chirps(), batch_size=8, num_workers=num_workers),
            "short": DataLoader(Chirps(64, samples=4000), batch_size=8, num_workers=num_workers),
        },
        mode="max_size_cycle",
    )
