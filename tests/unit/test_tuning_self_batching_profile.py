"""A loader that makes its own batches (its sampler yields what ``__getitem__`` takes, as lhotse's
samplers yield CutSets): its config's batch size is 1, so a batch's cost must come from the samples
its batches held, not from that 1. No clock: the costs are given, or only counted."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from stallscope.target import load_target
from stallscope.tuning.profiling import profile_loader
from stallscope.tuning.regions import classify
from stallscope.tuning.space import Profile


class ListBatches(Sampler[list[int]]):
    def __iter__(self):
        return iter([list(range(i, i + 12)) for i in range(0, 96, 12)])

    def __len__(self) -> int:
        return 8


class FetchesABatch(Dataset):
    def __getitem__(self, indices: list[int]) -> torch.Tensor:
        return torch.arange(float(len(indices) * 4)).reshape(len(indices), 4)


def self_batching() -> DataLoader:
    return DataLoader(FetchesABatch(), sampler=ListBatches(), batch_size=None)


def test_the_profile_counts_the_samples_a_self_made_batch_holds():
    pipeline = load_target(self_batching)
    assert pipeline.baseline.batches_itself
    profile = profile_loader(pipeline, max_seconds=0.05)
    assert profile.samples_per_batch == 12
    assert profile.batch_seconds(1) == profile.seconds_per_sample * 12 + profile.collate_s
    assert profile.to_dict()["samples_per_batch"] == 12


def test_a_self_made_batch_of_costly_samples_is_not_read_as_overhead():
    # 1.3 ms a sample, 13 samples a batch (lhotse's CutSets): 17 ms a batch, not the 1.3 ms the
    # config's batch size of 1 gave, which read as "comparable to moving it between processes".
    profile = Profile(seconds_per_sample=0.0013, cpu_per_wall=1.0, samples_per_batch=13.0)
    region = classify(profile, r0=700.0, rc=1100.0, cores=2, batch_size=1)
    assert region.name == "cpu-bound"
    per_config = Profile(seconds_per_sample=0.0013, cpu_per_wall=1.0)  # a batch of 1, as before
    assert classify(per_config, 700.0, 1100.0, 2, 1).name == "overhead-bound"
