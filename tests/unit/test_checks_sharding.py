"""The iterable-duplicates verdict (pure): made-up worker streams of hashes."""

from __future__ import annotations

from stallscope.checks.sharding import detect_iterable_duplicates, duplication_verdict


def _record(**streams: list[str]) -> dict:
    return {
        "digests": streams,
        "workers": len(streams),
        "prefix": 256,
        "start_method": "fork",
        "error": None,
    }


def test_a_replayed_stream_is_duplicated_in_the_same_order():
    stream = [f"s{i}" for i in range(8)]
    verdict = duplication_verdict(_record(**{"0": stream, "1": list(stream)}))
    assert verdict["duplicated"] is True and verdict["same_order"] is True
    assert verdict["duplicated_samples"] == 16 and verdict["distinct_duplicates"] == 8
    assert verdict["items_per_worker"] == {"0": 8, "1": 8}


def test_disjoint_shards_are_clean_and_a_partial_overlap_counts_from_a_fifth():
    assert (
        duplication_verdict(_record(**{"0": ["a", "b", "c", "d"], "1": ["e", "f", "g", "h"]}))[
            "duplicated"
        ]
        is False
    )
    # 2 of 10 items in each worker overlap: 4 of 20 hashed samples = 20%
    zero = [f"a{i}" for i in range(8)] + ["x", "y"]
    one = [f"b{i}" for i in range(8)] + ["y", "x"]
    verdict = duplication_verdict(_record(**{"0": zero, "1": one}))
    assert (
        verdict["duplicated"] is True
        and verdict["duplicate_fraction"] == 0.2
        and verdict["same_order"] is False
    )
    one[-1] = "z"  # 1 shared item: 2 of 20 samples, 10%
    assert duplication_verdict(_record(**{"0": zero, "1": one}))["duplicated"] is False


def test_data_that_repeats_within_a_worker_cannot_tell_and_is_never_flagged():
    labels = ["cat", "dog"] * 4  # a sharded stream of class labels repeats by nature
    verdict = duplication_verdict(_record(**{"0": labels, "1": list(labels)}))
    assert verdict["duplicated"] is None and "repeat" in verdict["reason"]
    assert (
        detect_iterable_duplicates({"sharding": _record(**{"0": labels, "1": list(labels)})}) == []
    )


def test_too_few_items_or_one_worker_cannot_tell():
    assert duplication_verdict(_record(**{"0": ["a", "b"], "1": ["a", "b"]}))["duplicated"] is None
    assert duplication_verdict(_record(**{"0": ["a", "b", "c", "d", "e"]}))["duplicated"] is None
    assert duplication_verdict({**_record(), "error": "OSError: gone"})["duplicated"] is None


def test_the_finding_carries_the_counts_and_the_fix():
    stream = [f"s{i}" for i in range(6)]
    (finding,) = detect_iterable_duplicates(
        {"sharding": _record(**{"0": stream, "1": list(stream)})}
    )
    assert finding.code == "iterable-duplicates" and finding.severity == "error"
    assert finding.message.startswith(
        "Every worker yields the same samples: 12 of the 12 samples hashed from 2 workers"
    )
    assert finding.evidence["items_per_worker"] == {"0": 6, "1": 6}
    assert finding.fix.count("\n") >= 3 and "get_worker_info()" in finding.fix


class _DyingStream:
    """An unsharded stream whose worker 1 exits with code 3 after a few items."""

    def __iter__(self):
        import os

        from torch.utils.data import get_worker_info

        info = get_worker_info()
        for i in range(10_000):
            if info is not None and info.id == 1 and i == 5:
                os._exit(3)
            yield i


def test_a_worker_that_dies_mid_stream_is_reported_as_its_death():
    import time
    import types

    from torch.utils.data import IterableDataset

    from stallscope.checks.sharding import probe_sharding

    class Dataset(IterableDataset):
        def __iter__(self):
            return iter(_DyingStream())

    pipeline = types.SimpleNamespace(dataset=Dataset(), worker_init_fn=None)
    record = probe_sharding(
        pipeline, workers=2, start_method="fork", deadline=time.monotonic() + 30, timeout=5.0
    )
    assert (
        record["error"] is not None
        and "a DataLoader worker died while reading the stream" in record["error"]
    )
    assert "exit code 3" in record["error"] or "exited unexpectedly" in record["error"]
    assert detect_iterable_duplicates({"sharding": record}) == []


def test_the_evidence_names_the_first_duplicated_samples_by_key_and_position():
    record = _record(**{"0": ["a", "b", "c", "d", "e"], "1": ["x", "c", "d", "e", "a"]})
    record["keys"] = {"0": ["k-a", "k-b", "k-c", "k-d", "k-e"], "1": [None] * 5}
    verdict = duplication_verdict(record)
    assert verdict["duplicated"] is True
    assert [e["key"] for e in verdict["examples"]] == ["k-a", "k-c", "k-d"]
    assert verdict["examples"][0]["positions"] == {"0": 0, "1": 4}
    (finding,) = detect_iterable_duplicates({"sharding": record})
    assert "e.g. sample 'k-a': worker 0 item 0, worker 1 item 4" in finding.message
    assert finding.evidence["examples"] == verdict["examples"]
    # Without keys the content hash is the evidence.
    del record["keys"]
    (finding,) = detect_iterable_duplicates({"sharding": record})
    assert "e.g. identical content a: worker 0 item 0, worker 1 item 4" in finding.message


def test_a_stream_that_ended_with_idle_workers_is_not_duplicated():
    # Worker 1 yielded nothing and the stream ended (a stream with one shard for two workers).
    record = {**_record(**{"0": [f"s{i}" for i in range(32)]}), "workers": 2, "ended": "exhausted"}
    verdict = duplication_verdict(record)
    assert verdict["duplicated"] is False and verdict["idle_workers"] == 1
    assert detect_iterable_duplicates({"sharding": record}) == []
    # Stopped before the end (a slow worker may yet yield): it cannot be told.
    record["ended"] = "deadline"
    assert duplication_verdict(record)["duplicated"] is None


def test_a_sample_key_is_read_from_the_fields_that_name_samples():
    import torch

    from stallscope.checks.sharding import sample_key

    assert sample_key({"__key__": "shard-0/000012", "jpg": b"..."}) == "shard-0/000012"
    assert sample_key({"__key__": ["a/1", "a/2"], "cls": [0, 1]}) == "a/1"  # a batch: its first
    assert sample_key({"index": torch.tensor([7, 8]), "image": torch.zeros(2)}) == "7"
    assert sample_key({"id": 3}) == "3"
    assert sample_key({"image": torch.zeros(2)}) is None
    assert sample_key((torch.zeros(2), 1)) is None
