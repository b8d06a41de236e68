"""``ss.seed_worker``: distinct, reproducible random streams in every DataLoader worker.

torch seeds each worker's ``random``, ``torch`` and NumPy's legacy global
RNG from ``base_seed + worker_id``, where ``base_seed`` is drawn from the
loader's ``generator`` (or the global torch RNG) when the iterator starts.
It cannot reach RNG *objects* the dataset created in ``__init__`` — a
``np.random.Generator``, a ``random.Random``, a ``torch.Generator``: every
worker holds an identical copy of the same state, so "random" augmentations
repeat across workers (SPEC §4 ``duplicate-rng``).

``seed_worker`` (pass it as ``worker_init_fn``) re-seeds all of them from
(base seed, worker id), with a separate child seed for each RNG object
derived from its attribute path, so the streams are different across
workers and across objects, and identical between two runs given the same
loader generator seed.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

# How deep seed_worker looks for RNG objects inside the dataset: dataset.transform.rng is depth 2;
# MONAI's transforms each hold one in a Compose, dataset.transform.transforms[4].R (depth 4), and a
# Subset around that dataset adds one more.
MAX_DEPTH = 5
# Containers larger than this are data, not configuration: not searched.
MAX_CONTAINER = 64


@dataclass
class SeedReport:
    """What :func:`seed_worker` seeded (returned for tests and diagnostics; DataLoader ignores
    it)."""

    worker_id: int
    base_seed: int
    seeded: list[str] = field(
        default_factory=list
    )  # "random", "numpy", "torch", "dataset.rng", ...


def seed_worker(worker_id: int) -> SeedReport:
    """Seed ``random``, NumPy (legacy and Generators held by the dataset) and torch for this worker.

    Use as ``DataLoader(..., worker_init_fn=ss.seed_worker, generator=g)``.
    Outside a worker (``num_workers=0``) it seeds from ``torch.initial_seed()``
    and looks for no dataset.
    """
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    # In a worker, torch.initial_seed() == base_seed + worker_id; base_seed comes from the
    # loader's generator, so this is reproducible given that generator.
    worker_seed = info.seed if info is not None else torch.initial_seed()
    base_seed = worker_seed - worker_id
    report = SeedReport(worker_id=worker_id, base_seed=base_seed)
    root = np.random.SeedSequence(
        [base_seed & 0xFFFFFFFF, (base_seed >> 32) & 0xFFFFFFFF, worker_id]
    )

    state = root.generate_state(4, dtype=np.uint64)
    random.seed(int(state[0]))
    report.seeded.append("random")
    np.random.seed(root.generate_state(1, dtype=np.uint32)[0])
    report.seeded.append("numpy")
    torch.manual_seed(int(state[1]) & 0x7FFF_FFFF_FFFF_FFFF)
    report.seeded.append("torch")

    if info is not None:
        for path, rng in find_rngs(info.dataset, "dataset"):
            _reseed(rng, _child_seed(root, path))
            report.seeded.append(path)
    return report


class ChainedWorkerInit:
    """A ``worker_init_fn`` that calls several in order (a class, so spawn can pickle it)."""

    def __init__(self, *fns: Any) -> None:
        self.fns = tuple(fn for fn in fns if fn is not None)

    def __call__(self, worker_id: int) -> None:
        for fn in self.fns:
            fn(worker_id)


def chain_worker_init(*fns: Any) -> ChainedWorkerInit:
    """Run the user's own ``worker_init_fn`` and then ``ss.seed_worker`` (or any others), in order.

    ``DataLoader(..., worker_init_fn=ss.chain_worker_init(my_init, ss.seed_worker))`` keeps
    what ``my_init`` does and adds the seeding it lacks.
    """
    return ChainedWorkerInit(*fns)


def _child_seed(root: np.random.SeedSequence, path: str) -> int:
    # Keyed by the attribute path, so adding an RNG elsewhere does not shift this one's stream.
    child = np.random.SeedSequence(
        root.entropy, spawn_key=(*root.spawn_key, zlib.crc32(path.encode()))
    )
    return int(child.generate_state(1, dtype=np.uint64)[0])


def _reseed(rng: Any, seed: int) -> None:
    """Re-seed ``rng`` in place: other references to the same object see the new stream."""
    if isinstance(rng, np.random.Generator):
        rng.bit_generator.state = type(rng.bit_generator)(seed).state
    elif isinstance(rng, np.random.RandomState):
        rng.seed(seed & 0xFFFFFFFF)
    elif isinstance(rng, random.Random):
        rng.seed(seed)
    elif isinstance(rng, torch.Generator):
        rng.manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)


def is_rng(obj: Any) -> bool:
    return isinstance(
        obj, (np.random.Generator, np.random.RandomState, random.Random, torch.Generator)
    )


def find_rngs(obj: Any, path: str, *, depth: int = MAX_DEPTH) -> Iterator[tuple[str, Any]]:
    """RNG objects reachable from ``obj`` through attributes, lists, tuples and dicts, with their
    paths.

    Skips the module-level global RNGs (seeded separately) and anything seen
    before; walks at most ``depth`` levels and containers of at most
    ``MAX_CONTAINER`` entries.
    """
    seen: set[int] = {id(random._inst), id(np.random.mtrand._rand)}
    yield from _walk(obj, path, depth, seen)


def _walk(obj: Any, path: str, depth: int, seen: set[int]) -> Iterator[tuple[str, Any]]:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if is_rng(obj):
        yield path, obj
        return
    if depth <= 0 or isinstance(
        obj, (str, bytes, int, float, bool, type(None), torch.Tensor, np.ndarray)
    ):
        return
    if isinstance(obj, dict):
        if len(obj) <= MAX_CONTAINER:
            for key, value in obj.items():
                yield from _walk(value, f"{path}[{key!r}]", depth - 1, seen)
        return
    if isinstance(obj, (list, tuple)):
        if len(obj) <= MAX_CONTAINER:
            for i, value in enumerate(obj):
                yield from _walk(value, f"{path}[{i}]", depth - 1, seen)
        return
    if isinstance(obj, type) or callable(obj) and not hasattr(obj, "__dict__"):
        return
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and len(attrs) <= 4 * MAX_CONTAINER:
        for name, value in list(attrs.items()):
            yield from _walk(value, f"{path}.{name}", depth - 1, seen)
