"""Objects around DataLoaders (NOTE [loader kinds]): a proxy that claims to be one is a wrapper, the
loader a wrapper really iterates is the one tuned, one that cannot be swapped is measured as it is,
and a one-shot generator is made anew for each pass."""

from __future__ import annotations

import pytest
import real_adapters as ra
from torch.utils.data import DataLoader

from stallscope.config import LoaderConfig
from stallscope.errors import UsageError
from stallscope.pipeline.kinds import (
    effective_path,
    is_dataloader,
    knob_parameters,
    path_text,
    paths_to,
    replaced_at,
)
from stallscope.pipeline.structure import shallow_copy
from stallscope.target import load_target


def test_a_proxy_that_claims_to_be_a_dataloader_is_not_one():
    proxy = ra.proxy_loader()
    assert isinstance(proxy, DataLoader)  # its disguise
    assert not is_dataloader(proxy)
    assert is_dataloader(proxy.inner_loader)
    clone = shallow_copy(proxy)
    assert type(clone) is ra.ProxyLoader and clone.inner_loader is proxy.inner_loader


def test_the_proxy_is_tuned_through_the_loader_it_holds():
    pipeline = load_target(ra.proxy_loader)
    assert pipeline.kind.name == "wrapped-dataloader"
    assert path_text(pipeline.kind.path) == ".inner_loader"
    trial = pipeline.kind.build(pipeline.baseline.replace(num_workers=0, batch_size=6))
    assert type(trial) is ra.ProxyLoader
    batch = next(iter(trial))
    assert isinstance(batch, ra.FeatureBatch) and batch.features.shape[0] == 6


def test_the_loader_that_really_runs_is_the_one_replaced():
    wrapper = ra.multitask_loader()
    inner = wrapper.loaders["chirps"]
    paths = [path_text(p) for p in paths_to(wrapper, inner)]
    assert paths == [".loaders['chirps']", "._flat[0]"]  # held twice, iterated through the list
    chosen = effective_path(wrapper, inner, paths_to(wrapper, inner))
    assert path_text(chosen) == "._flat[0]"
    # Replacing it there changes what the wrapper yields; in the dict it would not.
    swapped = replaced_at(wrapper, chosen, DataLoader(inner.dataset, batch_size=3))
    assert next(iter(swapped))["batch"][0].shape[0] == 3
    assert wrapper._flat[0] is inner  # the user's object is untouched


def test_a_wrapper_whose_loader_cannot_be_swapped_is_measured_as_it_is():
    wrapper = ra.frozen_copy_loader()
    assert effective_path(wrapper, wrapper.loader, paths_to(wrapper, wrapper.loader)) is None
    pipeline = load_target(ra.frozen_copy_loader)
    assert pipeline.kind.name == "iterable" and not pipeline.kind.tunable
    assert "keeps iterating its own DataLoader" in pipeline.kind.limits["tune"]


def test_a_one_shot_generator_is_made_anew_for_each_pass():
    pipeline = load_target(ra.wave_batches)
    first = list(pipeline.kind.build(pipeline.baseline))
    second = list(pipeline.kind.build(pipeline.baseline))
    assert (
        len(first) == len(second) == 12
    )  # the second pass is a fresh generator, not the used-up one


def test_a_generator_given_as_an_object_says_it_can_be_iterated_once():
    pipeline = load_target(ra.wave_batches())  # the generator itself: nothing can make another
    with pytest.raises(UsageError, match="one-shot iterator"):
        pipeline.kind.build(pipeline.baseline)


def test_labels_show_only_the_knobs_a_kind_has():
    config = LoaderConfig(num_workers=4, batch_size=32, prefetch_factor=2, worker_threads=4)
    assert config.label() == "w=4 threads×4 bs=32 pf=2"
    assert config.label(("worker_threads",)) == "threads×4"
    assert config.label(()) == "as built"
    assert (
        LoaderConfig(num_workers=0, batch_size=8).label(("num_workers", "prefetch_factor")) == "w=0"
    )


class EngineLoader:
    """An engine's loader of batches: its own worker processes, named as grain names them."""

    def __init__(self, worker_count: int, worker_buffer_size: int) -> None:
        self.worker_count = worker_count
        self.worker_buffer_size = worker_buffer_size

    def __iter__(self):
        return iter([[self.worker_count] * 4] * 3)


def make_engine_loader(worker_count: int = 0, worker_buffer_size: int = 1) -> EngineLoader:
    return EngineLoader(worker_count, worker_buffer_size)


def test_a_factory_that_names_its_workers_worker_count_is_tuned_through_it():
    # grain's DataLoader(worker_count=...) and factories written after it: the workers knob is the
    # factory's own parameter, so trials pass worker_count=N and the advice names it.
    assert knob_parameters(make_engine_loader) == {"worker_count": ("num_workers", 0)}
    pipeline = load_target(make_engine_loader)
    assert pipeline.kind.name == "factory" and pipeline.kind.knobs == ("num_workers",)
    built = pipeline.kind.build(pipeline.baseline.replace(num_workers=3))
    assert built.worker_count == 3 and next(iter(built)) == [3, 3, 3, 3]
