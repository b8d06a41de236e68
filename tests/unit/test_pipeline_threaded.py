"""Worker threads: ``ss.threaded_dataset``, ``LoaderConfig.worker_threads`` and the
thread-safety check."""

from __future__ import annotations

import gc
import pickle
import threading
import time

import pytest
import torch
from threads_datasets import (
    BatchedQuery,
    LatencyItems,
    NoisyRecords,
    PerThreadRecords,
    SharedHandleRecords,
    write_records,
)
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, Subset

import stallscope as ss
from stallscope.config import LoaderConfig
from stallscope.errors import PipelineError, UsageError
from stallscope.pipeline.loaders import build_loader
from stallscope.pipeline.threaded import ThreadedDataset, check_thread_safety, own_batched_fetch
from stallscope.target import Pipeline, load_target
from stallscope.throughput.measure import measure


def _fetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("stallscope-fetch")]


def _wait_no_fetch_threads(timeout: float = 5.0) -> list[threading.Thread]:
    deadline = time.monotonic() + timeout
    while _fetch_threads() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    return _fetch_threads()


def _indices(batches) -> list[int]:
    return [int(i) for b in batches for i in b["index"]]


# -- the wrapper ------------------------------------------------------------------------------


def test_items_come_back_in_index_order_fetched_concurrently():
    data = LatencyItems(n=64, wait_s=0.02, report_thread=True)
    wrapped = ss.threaded_dataset(data, threads=4)
    order = [9, 3, 7, 1, 0, 8, 2, 6]
    items = wrapped.__getitems__(order)
    assert [it["index"] for it in items] == order
    assert data.max_in_flight >= 2  # the items really overlapped
    assert all(it["thread"].startswith("stallscope-fetch") for it in items)
    wrapped.close()
    assert _wait_no_fetch_threads() == []


def test_the_wrapper_delegates_length_items_and_attributes():
    data = LatencyItems(n=10, wait_s=0.0)
    wrapped = ss.threaded_dataset(data, threads=2)
    assert len(wrapped) == 10
    assert wrapped[3]["index"] == 3
    assert wrapped.label == "latency"
    assert wrapped.wait_s == 0.0
    with pytest.raises(AttributeError):
        _ = wrapped.no_such_attribute
    assert ss.threaded_dataset(wrapped, threads=5).dataset is data  # rewrapping replaces the count
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError):
            ss.threaded_dataset(data, threads=bad)


def test_an_exception_names_the_index_in_the_main_process():
    wrapped = ss.threaded_dataset(LatencyItems(n=32, wait_s=0.001, fail_at=13), threads=4)
    with pytest.raises(KeyError) as info:
        list(DataLoader(wrapped, batch_size=8))
    assert any("dataset[13]" in note for note in info.value.__notes__)
    wrapped.close()


# fork only: under spawn, one run in several of the whole suite saw the failing worker abort at
# exit ("terminate called without an active exception"), so the main process saw a worker killed
# by SIGABRT before the KeyError. Open: a native thread outliving the pool in a spawn worker.
@pytest.mark.parametrize("context", ["fork"])
def test_an_exception_names_the_index_from_a_worker(context):
    wrapped = ss.threaded_dataset(LatencyItems(n=32, wait_s=0.001, fail_at=13), threads=4)
    loader = DataLoader(
        wrapped, batch_size=8, num_workers=2, multiprocessing_context=context, timeout=60
    )
    iterator = iter(loader)
    try:
        with pytest.raises(KeyError) as info:
            list(iterator)
    finally:
        iterator._shutdown_workers()  # the traceback keeps the iterator alive: stop its workers now
    assert "while fetching dataset[13]" in str(info.value)
    assert all(
        not w.is_alive() for w in iterator._workers
    )  # workers with fetch threads exit cleanly


def test_measure_names_the_index_that_raised():
    pipeline = Pipeline(
        dataset=LatencyItems(n=32, wait_s=0.0, fail_at=5),
        batch_size=8,
        baseline=LoaderConfig(batch_size=8),
    )
    with pytest.raises(PipelineError, match=r"dataset\[5\] raised KeyError"):
        measure(pipeline, LoaderConfig(batch_size=8, worker_threads=4), min_window_s=0.05)
    with pytest.raises(PipelineError, match=r"raised KeyError: 5.*the index was 5"):
        measure(
            pipeline,
            LoaderConfig(num_workers=1, batch_size=8, worker_threads=4),
            min_window_s=0.05,
            timeout=60,
        )


def test_pickles_without_its_pool_and_works_after():
    wrapped = ss.threaded_dataset(LatencyItems(n=16, wait_s=0.0), threads=3)
    wrapped.__getitems__([0, 1, 2])  # the pool exists now
    copy = pickle.loads(pickle.dumps(wrapped))
    assert copy._pool is None and copy.threads == 3
    assert [it["index"] for it in copy.__getitems__([4, 2, 0])] == [4, 2, 0]
    copy.close()
    wrapped.close()


def test_no_fetch_thread_outlives_the_wrapper():
    wrapped = ss.threaded_dataset(LatencyItems(n=64, wait_s=0.001), threads=6)
    assert len(list(DataLoader(wrapped, batch_size=16))) == 4
    assert _fetch_threads()  # the pool lives as long as the wrapper
    del wrapped
    assert _wait_no_fetch_threads() == []


def test_main_process_with_a_batch_sampler_and_a_custom_collate():
    data = LatencyItems(n=40, wait_s=0.001)
    batches = BatchSampler(SequentialSampler(range(40)), batch_size=7, drop_last=False)

    def collate(items):
        return {
            "index": torch.tensor([it["index"] for it in items]),
            "sum": sum(it["x"].sum() for it in items),
        }

    plain = list(DataLoader(data, batch_sampler=batches, collate_fn=collate))
    threaded = list(
        DataLoader(ss.threaded_dataset(data, threads=4), batch_sampler=batches, collate_fn=collate)
    )
    assert [b["index"].tolist() for b in threaded] == [b["index"].tolist() for b in plain]
    assert [float(b["sum"]) for b in threaded] == [float(b["sum"]) for b in plain]
    assert _wait_no_fetch_threads() == []


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_real_workers_with_a_shuffling_sampler(context):
    data = LatencyItems(n=96, wait_s=0.002, report_thread=True)
    wrapped = ss.threaded_dataset(data, threads=4)
    wrapped.__getitems__([0, 1])  # a pool in the parent: a fork child must start its own

    def loader(dataset, workers):
        gen = torch.Generator().manual_seed(7)
        return DataLoader(
            dataset,
            batch_size=12,
            shuffle=True,
            generator=gen,
            num_workers=workers,
            multiprocessing_context=context if workers else None,
            timeout=60 if workers else 0,
        )

    batches = list(loader(wrapped, 2))
    assert _indices(batches) == _indices(
        loader(data, 0)
    )  # the same shuffled order as the plain loader
    assert sorted(_indices(batches)) == list(range(96))
    threads = {name for b in batches for name in b["thread"]}
    assert threads and all(name.startswith("stallscope-fetch") for name in threads)
    wrapped.close()


def test_a_dataset_with_its_own_batched_fetch_keeps_it():
    data = BatchedQuery(n=32, wait_s=0.0)
    wrapped = ss.threaded_dataset(data, threads=4)
    assert wrapped.delegates_to == "BatchedQuery"
    items = wrapped.__getitems__([3, 1, 2])
    assert [it["index"] for it in items] == [3, 1, 2]
    assert {it["thread"] for it in items} == {threading.current_thread().name}  # no pool involved
    # torch's Subset only forwards __getitems__: looked through, so threads apply.
    assert own_batched_fetch(Subset(LatencyItems(n=8), [1, 2])) is None
    assert own_batched_fetch(Subset(data, [1, 2])) == "BatchedQuery"


def test_an_iterable_dataset_is_refused():
    from threads_datasets import CpuItems
    from torch.utils.data import IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(4))

    with pytest.raises(TypeError, match="map-style"):
        ss.threaded_dataset(Stream(), threads=2)
    pipeline = load_target(Stream())
    with pytest.raises(UsageError, match="IterableDataset"):
        build_loader(pipeline, LoaderConfig(batch_size=2, worker_threads=2))
    assert isinstance(
        build_loader(load_target(CpuItems(n=4)), LoaderConfig(worker_threads=2)).dataset,
        ThreadedDataset,
    )


# -- config, make_loader, the user's own wrapper --------------------------------------------------


def test_config_round_trip_and_unambiguous_labels(tmp_path):
    config = LoaderConfig(num_workers=4, batch_size=16, worker_threads=8, persistent_workers=True)
    assert LoaderConfig.from_dict(config.to_dict()) == config
    assert LoaderConfig.from_yaml(config.to_yaml()) == config
    config.save(tmp_path / "loader.yaml")
    assert LoaderConfig.load(tmp_path / "loader.yaml") == config
    assert config.label().startswith("w=4 threads×8 bs=16")
    assert "worker_threads" not in config.to_kwargs()
    intra = LoaderConfig(batch_size=16, torch_threads=2).label()
    assert "torch_threads=2" in intra and "threads×" not in intra
    assert LoaderConfig(batch_size=16, worker_threads=0).label() == "w=0 bs=16"
    assert (
        LoaderConfig.from_dict({"num_workers": 2, "batch_size": 4}).worker_threads == 0
    )  # older records
    with pytest.raises(ValueError):
        LoaderConfig(worker_threads=-1)
    with pytest.raises(ValueError, match="alternatives"):
        LoaderConfig(worker_threads=4, batched_fetch=True)


def test_make_loader_applies_worker_threads_from_a_config(tmp_path):
    path = tmp_path / "loader.yaml"
    LoaderConfig(num_workers=0, batch_size=8, worker_threads=4).save(path)
    data = LatencyItems(n=32, wait_s=0.002)
    loader = ss.make_loader(data, config=path)
    assert isinstance(loader.dataset, ThreadedDataset) and loader.dataset.threads == 4
    assert _indices(loader) == list(range(32))
    assert data.max_in_flight >= 2
    loader.dataset.close()
    plain = ss.make_loader(data, 8, config=LoaderConfig(batch_size=8))
    assert plain.dataset is data


def test_the_users_own_wrapper_becomes_the_baseline():
    loader = DataLoader(
        ss.threaded_dataset(LatencyItems(n=16, wait_s=0.0), threads=6), batch_size=4
    )
    pipeline = load_target(loader)
    assert pipeline.baseline.worker_threads == 6
    assert isinstance(pipeline.dataset, LatencyItems)
    rebuilt = build_loader(pipeline, pipeline.baseline.replace(worker_threads=0, num_workers=1))
    assert rebuilt.dataset is pipeline.dataset
    # In this process (w=0) a trial fetches from a shallow copy of it (structure.as_built).
    rebuilt = build_loader(pipeline, pipeline.baseline.replace(worker_threads=0, num_workers=0))
    assert type(rebuilt.dataset) is LatencyItems and rebuilt.dataset is not pipeline.dataset
    assert len(rebuilt.dataset) == len(pipeline.dataset)


# -- the thread-safety check -----------------------------------------------------------------------


def test_check_catches_a_shared_file_handle(tmp_path):
    path = write_records(256, str(tmp_path / "records.bin"))
    result = check_thread_safety(SharedHandleRecords(path, wait_s=0.001), threads=8)
    assert not result.safe
    assert result.mismatched
    assert "not thread-safe" in result.reason and "seek()+read()" in result.reason
    assert result.to_dict()["safe"] is False


def test_check_passes_per_thread_handles_and_random_augmentation(tmp_path):
    path = write_records(256, str(tmp_path / "records.bin"))
    safe = check_thread_safety(PerThreadRecords(path, wait_s=0.001), threads=8, max_seconds=0.5)
    assert safe.safe and safe.random_fields == 0 and safe.rounds >= 2, safe.reason
    noisy = check_thread_safety(NoisyRecords(path, wait_s=0.001), threads=8, max_seconds=0.5)
    assert noisy.safe, noisy.reason
    assert noisy.random_fields == len(noisy.indices)  # the noise: compared by type and shape only


def test_check_flags_a_dataset_that_raises_only_under_concurrency():
    class Client:
        """A client that refuses a second request while one is in flight (not thread-safe)."""

        def __init__(self):
            self.busy = False

        def get(self, i):
            if self.busy:
                raise RuntimeError("request already in progress")
            self.busy = True
            try:
                time.sleep(0.002)
                return i * 2
            finally:
                self.busy = False

    class Remote(torch.utils.data.Dataset):
        def __init__(self):
            self.client = Client()

        def __len__(self):
            return 64

        def __getitem__(self, i):
            return self.client.get(i)

    result = check_thread_safety(Remote(), threads=8)
    assert not result.safe
    assert (
        "raised RuntimeError when 16 threads fetched at once" in result.reason
    )  # twice the threads asked for


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_with_fetch_threads_exit_cleanly(context):
    wrapped = ss.threaded_dataset(LatencyItems(n=48, wait_s=0.002), threads=8)
    loader = DataLoader(
        wrapped,
        batch_size=8,
        num_workers=2,
        persistent_workers=True,
        multiprocessing_context=context,
        timeout=60,
    )
    for _ in range(2):  # two epochs on the same persistent workers (and their pools)
        assert sorted(_indices(loader)) == list(range(48))
    iterator = loader._iterator
    workers = list(iterator._workers)
    iterator._shutdown_workers()
    # Exit code 0: each worker left its loop and joined its fetch threads by itself, in time
    # (torch terminates a worker that does not, which would read -15).
    assert [w.exitcode for w in workers] == [0, 0]
