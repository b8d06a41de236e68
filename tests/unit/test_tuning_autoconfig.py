"""ss.make_loader: hardware-aware defaults, given/YAML configs, overrides, and the tuning cache."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, Subset, TensorDataset, get_worker_info
from tune_pipelines import ArrayDataset, WaitingDataset

import stallscope as ss
from stallscope.config import LoaderConfig
from stallscope.errors import UsageError
from stallscope.tuning import autoconfig
from stallscope.tuning.autoconfig import TuneCache, auto_config, cache_key, dataset_fingerprint


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(100))


class ShardedStream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, 100, step))


# -- the hardware-aware rule ---------------------------------------------------------------


@pytest.mark.parametrize(
    "cores, length, batch, workers",
    [
        (2, 10_000, 32, 2),
        (4, 10_000, 32, 4),
        (8, 10_000, 32, 7),
        (16, 10_000, 32, 15),
        (8, 160, 32, 5),
        (8, 96, 32, 0),
    ],
)
def test_auto_rule_for_map_style_datasets(cores, length, batch, workers):
    decision = auto_config(WaitingDataset(n=length), batch, cores=cores, cuda=False)
    assert decision.config.num_workers == workers
    assert decision.config.persistent_workers == (workers > 0)
    assert not decision.config.pin_memory and not decision.config.batched_fetch
    assert decision.reasons


def test_auto_rule_pins_memory_with_cuda():
    assert auto_config(WaitingDataset(), 32, cores=4, cuda=True).config.pin_memory


def test_auto_rule_fetches_tensor_datasets_in_batches_without_workers():
    ds = TensorDataset(torch.randn(1000, 4))
    for dataset in (ds, Subset(ds, range(500))):
        config = auto_config(dataset, 64, cores=8, cuda=False).config
        assert config.batched_fetch and config.num_workers == 0


def test_auto_rule_for_iterable_datasets():
    assert auto_config(Stream(), 8, cores=4, cuda=False).config.num_workers == 0
    assert auto_config(ShardedStream(), 8, cores=4, cuda=False).config.num_workers == 4


# -- make_loader ---------------------------------------------------------------------------


def test_make_loader_auto_builds_a_seeded_loader(monkeypatch):
    monkeypatch.setenv("STALLSCOPE_CORES", "2")
    loader = ss.make_loader(WaitingDataset(n=64, wait_s=0.0), 8)
    assert isinstance(loader, DataLoader)
    assert loader.stallscope_source == "auto"
    assert loader.num_workers == 2 and loader.persistent_workers
    assert loader.worker_init_fn is ss.seed_worker
    assert sum(len(b[1]) for b in loader) == 64
    del loader  # persistent workers end with the loader


def test_make_loader_tensor_dataset_returns_whole_batches():
    data = torch.arange(1000.0)
    loader = ss.make_loader(TensorDataset(data), 100)
    assert loader.stallscope_config.batched_fetch
    batches = list(loader)
    assert len(batches) == 10 and torch.equal(torch.cat([b[0] for b in batches]), data)


def test_make_loader_with_a_config_a_yaml_file_and_overrides(tmp_path):
    config = LoaderConfig(num_workers=1, batch_size=16, prefetch_factor=3)
    path = tmp_path / "loader.yaml"
    config.save(path)
    from_file = ss.make_loader(ArrayDataset(n=64), config=path)
    assert (
        from_file.stallscope_source == "file"
        and from_file.prefetch_factor == 3
        and from_file.batch_size == 16
    )
    given = ss.make_loader(ArrayDataset(n=64), 8, config, num_workers=0, timeout=0)
    assert given.stallscope_source == "given" and given.num_workers == 0 and given.batch_size == 8
    assert sum(len(b[1]) for b in given) == 64


def test_make_loader_chains_the_users_worker_init_after_seeding():
    loader = ss.make_loader(
        WaitingDataset(n=8, wait_s=0.0),
        4,
        LoaderConfig(num_workers=1, batch_size=4),
        worker_init_fn=print,
    )
    assert isinstance(loader.worker_init_fn, autoconfig.ChainedWorkerInit)
    assert loader.worker_init_fn.fns == (ss.seed_worker, print)


def test_make_loader_rejects_an_unknown_config():
    with pytest.raises(UsageError, match="auto"):
        ss.make_loader(ArrayDataset(n=8), 4, config="fastest")


# -- the tuning cache ----------------------------------------------------------------------


def _fake_tune(calls: list):
    def fake(dataset, batch_size, **kwargs):
        calls.append(batch_size)
        config = LoaderConfig(num_workers=0, batch_size=batch_size, batched_fetch=True)
        return SimpleNamespace(
            config=config,
            samples_per_s=1e5,
            baseline_samples_per_s=1e4,
            confidence=0.95,
            tuning_seconds=1.0,
        )

    return fake


def test_tuned_runs_once_then_comes_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STALLSCOPE_CACHE", str(tmp_path))
    calls: list = []
    monkeypatch.setattr(autoconfig, "_tune_dataset", _fake_tune(calls))
    dataset = ArrayDataset(n=256)
    first = ss.make_loader(dataset, 32, config="tuned")
    second = ss.make_loader(ArrayDataset(n=256), 32, config="tuned")  # an equal dataset, rebuilt
    assert calls == [32]
    assert (first.stallscope_source, second.stallscope_source) == ("tuned", "cache")
    assert first.stallscope_config == second.stallscope_config
    files = list((tmp_path / "tune").glob("*.json"))
    assert len(files) == 1
    entry = json.loads(files[0].read_text())
    assert entry["config"]["batched_fetch"] is True and entry["samples_per_s"] == 1e5
    ss.make_loader(dataset, 64, config="tuned")  # another batch size is another key
    assert calls == [32, 64]


def test_cache_key_covers_dataset_host_and_torch_version(monkeypatch):
    base = cache_key(WaitingDataset(n=100), 32)
    assert cache_key(WaitingDataset(n=100), 32) == base
    assert cache_key(WaitingDataset(n=101), 32) != base
    assert cache_key(WaitingDataset(n=100, wait_s=0.5), 32) != base  # scalar settings count
    assert cache_key(ArrayDataset(n=100), 32) != base
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    assert cache_key(WaitingDataset(n=100), 32) != base
    monkeypatch.undo()
    monkeypatch.setattr(autoconfig, "usable_cores", lambda: 97)
    assert cache_key(WaitingDataset(n=100), 32) != base


def test_a_corrupt_cache_entry_is_ignored(tmp_path):
    cache = TuneCache(tmp_path)
    cache.put("k", LoaderConfig(num_workers=3, batch_size=8))
    assert cache.get("k") == LoaderConfig(num_workers=3, batch_size=8)
    cache.path("k").write_text("{not json")
    assert cache.get("k") is None


def test_dataset_fingerprint_describes_the_data():
    fp = dataset_fingerprint(TensorDataset(torch.zeros(10, 3), torch.zeros(10, dtype=torch.long)))
    assert fp["length"] == 10 and fp["tensors"] == ["Tensor[10,3] float32", "Tensor[10] int64"]


def test_tuned_for_real_then_reused_without_measuring(tmp_path, monkeypatch):
    monkeypatch.setenv("STALLSCOPE_CACHE", str(tmp_path))
    dataset = TensorDataset(torch.randn(2048, 4), torch.arange(2048))
    first = ss.make_loader(dataset, 64, config="tuned", tune_budget_s=4.0)
    assert first.stallscope_source == "tuned"

    def no_tuning(*args, **kwargs):
        raise AssertionError("the second make_loader must not tune again")

    monkeypatch.setattr(autoconfig, "_tune_dataset", no_tuning)
    second = ss.make_loader(dataset, 64, config="tuned")
    assert second.stallscope_source == "cache"
    assert second.stallscope_config == first.stallscope_config
