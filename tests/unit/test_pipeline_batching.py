"""Batched fetching: a vectorised fetch is offered only when it returns exactly the
collated batch."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, Subset, TensorDataset
from tune_pipelines import ArrayDataset, WaitingDataset

from stallscope.checks.memory import IndexCycler
from stallscope.config import LoaderConfig
from stallscope.pipeline.batching import ItemsFetch, same_batch, vectorised_fetcher
from stallscope.pipeline.loaders import build_loader
from stallscope.target import pipeline_from_object


class RandomItems(Dataset):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, index):
        return torch.rand(3)


class SliceOnly(Dataset):
    """Accepts an array index but returns something else than the per-item path (a sum)."""

    def __init__(self) -> None:
        self.x = torch.arange(40.0).reshape(20, 2)

    def __len__(self) -> int:
        return 20

    def __getitem__(self, index):
        return self.x[index].sum() if not isinstance(index, int) else self.x[index]


class HasGetitems(TensorDataset):
    def __getitems__(self, indices):
        return [self[i] for i in indices]


def test_kinds_found_and_refused():
    assert (
        vectorised_fetcher(TensorDataset(torch.randn(50, 2), torch.arange(50))).kind
        == "tensor-index"
    )
    assert (
        vectorised_fetcher(Subset(TensorDataset(torch.randn(50, 2)), range(10, 40))).kind
        == "subset/tensor-index"
    )
    assert vectorised_fetcher(ArrayDataset(n=100)).kind == "array-index"
    assert vectorised_fetcher(HasGetitems(torch.randn(10))).kind == "getitems"
    for refused in (RandomItems(), SliceOnly(), list(range(30)), WaitingDataset(n=8, wait_s=0.0)):
        assert vectorised_fetcher(refused).fetch is None
    assert vectorised_fetcher(TensorDataset(torch.randn(10)), collate_fn=lambda b: b).fetch is None


def test_batched_loader_yields_the_same_batches_as_the_per_item_loader():
    for dataset in (
        TensorDataset(torch.randn(100, 3), torch.arange(100)),
        ArrayDataset(n=100),
        Subset(TensorDataset(torch.arange(200.0)), range(50, 150)),
    ):
        pipeline = pipeline_from_object(dataset)
        pipeline.batch_size = 16
        plain = list(build_loader(pipeline, LoaderConfig(batch_size=16)))
        batched = list(build_loader(pipeline, LoaderConfig(batch_size=16, batched_fetch=True)))
        assert len(plain) == len(batched) == 7
        assert all(same_batch(a, b) for a, b in zip(plain, batched))


def test_batched_loader_with_workers_keeps_the_order_of_a_cycling_sampler():
    pipeline = pipeline_from_object(TensorDataset(torch.arange(64.0)))
    pipeline.batch_size = 8
    sampler = IndexCycler(list(range(64)), 160, seed=3)
    loader = build_loader(
        pipeline,
        LoaderConfig(num_workers=2, batch_size=8, batched_fetch=True),
        sampler=sampler,
        timeout=20,
    )
    values = torch.cat([b[0] for b in loader])
    assert values.tolist() == [float(i) for i in sampler]


def test_fallback_fetch_collates_items_in_one_call():
    fetch = ItemsFetch()
    batch = fetch(WaitingDataset(n=8, wait_s=0.0), [3, 5])
    assert batch[0].shape == (2, 16) and batch[1].tolist() == [3 % 7, 5 % 7]
