"""ss.seed_worker: distinct per-worker streams, reproducible from the loader's generator."""

from __future__ import annotations

import random

import numpy as np
import torch
from torch.utils.data import DataLoader
from tune_seeding_data import RngHoldingDataset

import stallscope as ss
from stallscope.pipeline.seeding import find_rngs

COLUMNS = ["numpy Generator", "random.Random", "torch.Generator", "random", "numpy legacy", "torch"]


def _streams(
    seed: int, *, ctx: str, init=ss.seed_worker, torch_generator: bool = True
) -> dict[int, torch.Tensor]:
    loader = DataLoader(
        RngHoldingDataset(torch_generator=torch_generator),
        batch_size=2,
        num_workers=2,
        worker_init_fn=init,
        generator=torch.Generator().manual_seed(seed),
        multiprocessing_context=ctx,
    )
    rows = torch.cat(list(loader))
    return {w: rows[rows[:, 0] == w][:, 1:] for w in (0, 1)}


def test_same_generator_seed_same_streams_and_workers_differ():
    first = _streams(7, ctx="fork")
    again = _streams(7, ctx="fork")
    other = _streams(8, ctx="fork")
    for w in (0, 1):
        assert torch.equal(first[w], again[w]), (
            "same loader seed must reproduce every worker's stream"
        )
    for col, name in enumerate(COLUMNS):
        assert not torch.equal(first[0][:, col], first[1][:, col]), (
            f"{name}: workers 0 and 1 draw the same stream"
        )
        assert not torch.equal(first[0][:, col], other[0][:, col]), (
            f"{name}: another loader seed gives the same stream"
        )


def test_spawned_workers_get_the_same_streams_as_forked_ones():
    # The streams depend only on (loader seed, worker id, the dataset's pickled state), not on the
    # start method. One spawned loader (workers import torch afresh: seconds on a small machine).
    # torch 2.13 cannot unpickle a torch.Generator in a spawned worker, hence torch_generator=False.
    spawned = _streams(7, ctx="spawn", torch_generator=False)
    forked = _streams(7, ctx="fork", torch_generator=False)
    for w in (0, 1):
        assert torch.equal(spawned[w], forked[w])
    for col in (0, 1, 3, 4, 5):
        assert not torch.equal(spawned[0][:, col], spawned[1][:, col]), COLUMNS[col]


def test_without_seed_worker_dataset_held_generators_repeat_across_workers():
    plain = _streams(7, ctx="fork", init=None)
    # The trap this function exists for: identical streams in both workers for the held RNG objects.
    for col in range(3):
        assert torch.equal(plain[0][:, col], plain[1][:, col])


def test_find_rngs_walks_attributes_and_reports_paths():
    ds = RngHoldingDataset()
    ds.extra = {"aug": [random.Random(0)]}
    found = dict(find_rngs(ds, "dataset"))
    assert set(found) == {
        "dataset.gen",
        "dataset.transform.rng",
        "dataset.torch_gen",
        "dataset.extra['aug'][0]",
    }
    assert "dataset.transform.rng" not in dict(find_rngs(ds, "dataset", depth=1))


class _OwnRngTransform:
    """A transform that owns its RandomState, as MONAI's Randomizable transforms do (``self.R``)."""

    def __init__(self):
        self.R = np.random.RandomState()

    def __call__(self, x):
        return x + self.R.randint(1 << 30)


class _ComposedDataset(torch.utils.data.Dataset):
    def __init__(self):
        self.transform = type("Compose", (), {})()
        self.transform.transforms = [_OwnRngTransform(), _OwnRngTransform()]

    def __len__(self):
        return 8

    def __getitem__(self, i):
        value = 0
        for t in self.transform.transforms:
            value = t(value)
        return torch.tensor([torch.utils.data.get_worker_info().id, value])


def test_generators_inside_a_compose_inside_a_subset_are_reached_and_reseeded():
    # dataset.dataset.transform.transforms[1].R: five steps down, where a MONAI pipeline under a
    # torch Subset keeps its random state (the check found such a pipeline's crops identical in
    # every worker, and seed_worker, which looked three steps down, did not fix them).
    subset = torch.utils.data.Subset(_ComposedDataset(), range(8))
    assert "dataset.dataset.transform.transforms[1].R" in dict(find_rngs(subset, "dataset"))
    streams = {}
    for init in (None, ss.seed_worker):
        loader = DataLoader(subset, batch_size=4, num_workers=2, worker_init_fn=init)
        rows = torch.cat(list(loader))
        streams[init] = [rows[rows[:, 0] == w][:, 1] for w in (0, 1)]
    assert torch.equal(*streams[None])  # the trap: both workers draw the same numbers
    assert not torch.equal(*streams[ss.seed_worker])


def test_seed_worker_in_the_main_process_seeds_the_globals():
    torch.manual_seed(5)
    report = ss.seed_worker(0)
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    torch.manual_seed(5)
    ss.seed_worker(0)
    b = (random.random(), np.random.rand(), torch.rand(1).item())
    assert a == b
    assert report.seeded == ["random", "numpy", "torch"]
