"""A loader that builds its batches itself has no batch size setting: no label shows one, and
the analysis reads the batches' size from what was measured (issue 25, item 4)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

from stallscope.analysis.readers import batch_size_of
from stallscope.config import LoaderConfig, config_from_loader
from stallscope.pipeline.kinds import factory_baseline


class Batches(Dataset):
    """Each item is a batch of 16 already."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.zeros(16, 3)


class HoldsLoader:
    """What a wrapper library returns: no batch_size of its own."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __iter__(self):
        return iter(self.loader)


def test_batch_size_none_is_a_loader_that_batches_itself():
    config = config_from_loader(DataLoader(Batches(), batch_size=None, num_workers=2))
    assert config.batches_itself
    assert config.label() == "w=2 pf=2"
    assert batch_size_of(config.to_dict()) is None


def test_a_batch_size_the_loader_takes_is_shown():
    config = config_from_loader(DataLoader(Batches(), batch_size=4))
    assert not config.batches_itself
    assert config.label() == "w=0 bs=4"
    assert batch_size_of(config.to_dict()) == 4


def test_the_flag_rides_on_every_variant_of_the_baseline():
    base = LoaderConfig(batch_size=1, batches_itself=True)
    assert base.replace(num_workers=4).label() == "w=4 pf=2"
    assert LoaderConfig.from_dict(base.to_dict()) == base


def test_a_factory_product_without_a_batch_size_keeps_what_it_holds():
    built = config_from_loader(DataLoader(Batches(), batch_size=None, num_workers=2))
    product = HoldsLoader(DataLoader(Batches(), batch_size=None, num_workers=2))
    parameters = {"num_workers": ("num_workers", 2)}
    assert factory_baseline(parameters, product, built).batches_itself
    # Nothing known about what it built: the batch size is no setting either.
    assert factory_baseline(parameters, product, None).batches_itself
    # A factory taking batch_size= sets it.
    with_bs = {**parameters, "batch_size": ("batch_size", 8)}
    config = factory_baseline(with_bs, product, built)
    assert not config.batches_itself and config.batch_size == 8
    # A DataLoader that says its batch size.
    loader = DataLoader(Batches(), batch_size=4)
    assert not factory_baseline(parameters, loader, config_from_loader(loader)).batches_itself


def test_a_loader_whose_sampler_yields_batches_is_copied_not_rebuilt_from_its_parts():
    from real_loader_kinds import Recordings, sampled_batches
    from torch.utils.data import BatchSampler, SequentialSampler

    from stallscope.pipeline.preflight import preflight
    from stallscope.target import load_target

    sampler = BatchSampler(SequentialSampler(range(480)), batch_size=16, drop_last=False)
    pipeline = load_target(DataLoader(Recordings(), sampler=sampler, batch_size=None))
    # Rebuilt from its parts it would fetch dataset[0], dataset[1], ... and collate them.
    assert pipeline.kind.name == "unbatched-dataloader" and not pipeline.kind.rebuilds_from_parts
    assert not pipeline.has_dataset  # no per-index probe fetches dataset[i]
    assert "batch_size" not in pipeline.kind.knobs and "worker_threads" not in pipeline.kind.knobs
    assert pipeline.batches_per_epoch() == 30  # its sampler's lists, not len(dataset) batches of 1
    pre = preflight(pipeline)  # the loader's own first batch: Recordings refuses an integer index
    assert pre.batch_structure.startswith("{frames: Tensor[16,20,8]")
    # Built by a factory whose knob it is, the same holds: trials call the factory.
    factory = load_target(sampled_batches)
    assert factory.kind.name == "factory" and not factory.has_dataset
    # Automatic batching on: rebuilt from the parts as before.
    batched = load_target(DataLoader(Batches(), batch_size=2))
    assert batched.kind.rebuilds_from_parts and batched.has_dataset
