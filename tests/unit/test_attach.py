"""attach's analysis: data wait of the training thread, the workers' stage table, stuck threads,
uneven workers and ranks, counted from a capture (real py-spy output in ``fixtures/attach``, and
small hand-made captures for each rule)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from stallscope.analysis import report_facts
from stallscope.analysis.against import against_facts
from stallscope.analysis.attach import (
    attach_facts,
    attach_stage_rows,
    attach_summary,
    classify_training_sample,
    fold_worker_sample,
    wilson_interval,
)
from stallscope.attach.frames import describe_frames
from stallscope.attach.pyspy import parse_speedscope, run_lengths
from stallscope.record import RunRecord
from stallscope.render.console import ConsoleRenderer
from stallscope.render.markdown import MarkdownRenderer
from stallscope.schema import record_schema

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "attach"
DATALOADER = "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py"
WORKER = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py"
FETCH = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py"
QUEUES = "/usr/lib/python3.11/multiprocessing/queues.py"
TRAIN = "/home/me/train.py"


def fixture_capture(name: str, hang_after: float = 1.0) -> dict:
    """The capture the probe would store for a fixture (its pieces, without a live process)."""
    capture = parse_speedscope(json.loads((FIXTURES / f"pyspy_{name}.json").read_text()))
    root = next(pid for pid, parent in capture.parents.items() if parent is None)
    return {
        "pid": root,
        "duration_s": 3.0,
        "rate_hz": 20,
        "interval_s": capture.interval_s,
        "trainers": [root],
        "processes": [{"pid": p, "parent": q} for p, q in capture.parents.items()],
        "frames": describe_frames(capture.frames),
        "stacks": [list(s) for s in capture.stacks],
        "threads": [
            {"pid": t.pid, "tid": t.tid, "name": t.name, "runs": run_lengths(t.samples)}
            for t in capture.threads
        ],
        "hang_after_s": hang_after,
    }


def test_input_bound_fixture_counts():
    facts = attach_facts({"attach_capture": fixture_capture("input")})
    assert facts is not None
    assert facts.counts == {"data wait": 43, "host→device copy": 0, "other": 0, "compute": 16}
    assert facts.samples == 59
    assert facts.data_wait_fraction == pytest.approx(43 / 59)
    assert facts.verdict == "input-bound"
    assert [(w.pid, w.samples, w.busy_fraction) for w in facts.workers] == [
        (27710, 59, 1.0),
        (27711, 59, 1.0),
    ]
    assert not facts.uneven and facts.stuck == []
    rows = [(s.name, s.kind, s.samples) for s in facts.stages]
    assert rows == [
        ("slow_read", "user", 83),
        ("augment", "user", 35),
        ("transfer: serialise", "serialise", 1),
    ]
    assert facts.stages[0].share == pytest.approx(83 / 119)
    assert facts.top_functions[0].name == "slow_read"
    roles = {(t.pid, t.name): t.role for t in facts.threads}
    assert roles[(27600, "MainThread")] == "training"
    assert roles[(27710, "MainThread")] == "worker"


def test_stuck_fixture_names_the_worker_and_its_function():
    facts = attach_facts({"attach_capture": fixture_capture("stuck")})
    assert facts is not None
    assert facts.data_wait_fraction == 1.0
    by_role = {s.role: s for s in facts.stuck}
    worker = by_role["worker"]
    assert worker.pid == 27946 and worker.seconds == pytest.approx(59 * 0.05)
    assert worker.ongoing
    assert worker.stack[-1].startswith("wait_forever (pipelines/attach_training.py:")
    assert by_role["training"].stack[-6].startswith("_MultiProcessingDataLoaderIter._try_get_data")
    # the idle worker waits for indices: not stuck, but the stuck one is named as uneven
    assert [w.pid for w in facts.uneven] == [27946]
    assert [(w.pid, w.busy_fraction) for w in facts.workers] == [(27945, 0.0), (27946, 1.0)]


def test_stuck_needs_hang_after():
    assert attach_facts({"attach_capture": fixture_capture("stuck", 3.0)}).stuck == []


def test_wilson_interval():
    low, high = wilson_interval(43, 59)  # by hand: centre 0.7148, half-width 0.1108
    assert (round(low, 4), round(high, 4)) == (0.604, 0.8256)
    assert wilson_interval(0, 0) is None
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == 1.0


# -- hand-made captures ------------------------------------------------------------------


def frame(name, file=TRAIN, line=1, **marks):
    return {
        "name": name,
        "file": file,
        "line": line,
        **({"user": True} if file == TRAIN else {}),
        **marks,
    }


def test_training_samples_are_classified_transfer_before_wait():
    main = frame("main")
    wait = frame("_BaseDataLoaderIter.__next__", DATALOADER)
    assert classify_training_sample([main, wait]) == "data wait"
    assert classify_training_sample([main, frame("train_step")]) == "compute"
    to_device = frame("train_step", code="x = batch.to(device, non_blocking=True)")
    assert classify_training_sample([main, to_device]) == "host→device copy"
    pin = frame("pin_memory", "/x/site-packages/torch/utils/data/_utils/pin_memory.py")
    assert classify_training_sample([main, wait, pin]) == "host→device copy"
    save = frame("save", "/x/site-packages/torch/serialization.py")
    assert classify_training_sample([main, save]) == "other"
    generator = frame("batches")
    assert classify_training_sample([main, generator]) == "compute"
    assert classify_training_sample([main, generator], ["batches"]) == "data wait"
    stateful = frame(
        "StatefulDataLoader.__next__",
        "/x/site-packages/torchdata/stateful_dataloader/stateful_dataloader.py",
    )
    assert classify_training_sample([main, stateful]) == "data wait"


def worker_stack(*below):
    return [
        frame("_worker_loop", WORKER),
        frame("_MapDatasetFetcher.fetch", FETCH),
        frame("Faces.__getitem__", stage="other (__getitem__)"),
        *below,
    ]


def test_worker_samples_fold_into_stage_rows():
    assert fold_worker_sample(worker_stack()) == ("other (__getitem__)", "other")
    assert fold_worker_sample(worker_stack(frame("load_face"))) == ("load_face", "user")
    normalize = frame("Normalize.__call__", "/x/site-packages/vision/transforms.py")
    inner = frame("normalize", "/x/site-packages/vision/functional.py")
    assert fold_worker_sample(worker_stack(normalize, inner)) == ("Normalize", "transform")
    decode = frame("ImageFile.load", "/x/site-packages/PIL/ImageFile.py", stage="decode")
    assert fold_worker_sample(worker_stack(frame("load_face"), decode)) == ("decode", "decode")
    imread = frame("load_face", code="cv2.imread(p)", leaf_stage="decode")
    assert fold_worker_sample(worker_stack(imread)) == ("decode", "decode")
    collate = frame("default_collate", "/x/torch/utils/data/_utils/collate.py", stage="collate")
    assert fold_worker_sample([frame("_worker_loop", WORKER), frame("f", FETCH), collate]) == (
        "collate",
        "collate",
    )


def synthetic(threads, frames, stacks, trainers=(1,), processes=None, interval=0.01, hang=1.0):
    return {
        "attach_capture": {
            "pid": trainers[0],
            "duration_s": 1.0,
            "rate_hz": 100,
            "interval_s": interval,
            "trainers": list(trainers),
            "processes": processes or [{"pid": p, "parent": None} for p in trainers],
            "frames": frames,
            "stacks": stacks,
            "threads": threads,
            "hang_after_s": hang,
        }
    }


def test_three_workers_one_uneven_and_the_slowest_rank():
    frames = [
        frame("main"),  # 0
        frame("_BaseDataLoaderIter.__next__", DATALOADER),  # 1
        frame("step"),  # 2
        frame("_worker_loop", WORKER),  # 3
        frame("Queue.get", QUEUES),  # 4
        frame("_MapDatasetFetcher.fetch", FETCH),  # 5
        frame("Ds.__getitem__", stage="other (__getitem__)"),  # 6
        frame("read_shard"),  # 7
    ]
    stacks = [[0, 1], [0, 2], [3, 4], [3, 5, 6, 7]]
    idle, busy = 2, 3
    threads = [
        {"pid": 1, "tid": 1, "name": "MainThread", "runs": [[0, 30], [1, 70]]},
        {"pid": 2, "tid": 2, "name": "MainThread", "runs": [[0, 60], [1, 40]]},
        {"pid": 11, "tid": 11, "name": "MainThread", "runs": [[busy, 20], [idle, 80]]},
        {"pid": 12, "tid": 12, "name": "MainThread", "runs": [[busy, 25], [idle, 75]]},
        {"pid": 13, "tid": 13, "name": "MainThread", "runs": [[busy, 90], [idle, 10]]},
    ]
    processes = [
        {"pid": 1, "parent": 100, "rank": 0},
        {"pid": 2, "parent": 100, "rank": 1},
        {"pid": 11, "parent": 1},
        {"pid": 12, "parent": 1},
        {"pid": 13, "parent": 1},
    ]
    facts = attach_facts(synthetic(threads, frames, stacks, (1, 2), processes, hang=5.0))
    assert facts.counts["data wait"] == 90 and facts.samples == 200
    assert facts.data_wait_fraction == pytest.approx(0.45)
    assert [(r.rank, r.data_wait_fraction) for r in facts.ranks] == [(0, 0.3), (1, 0.6)]
    assert facts.slowest_rank.rank == 1
    assert [w.pid for w in facts.uneven] == [13]
    assert all(w.trainer == 1 for w in facts.workers)
    assert [(s.name, s.samples) for s in facts.stages] == [("read_shard", 135)]
    assert facts.stuck == []  # 0.9 s busy at most, and idle waits never count
    summary = attach_summary(facts)
    assert [r["slowest"] for r in summary["ranks"]] == [False, True]


def test_no_loader_in_sight_says_what_the_process_does():
    frames = [frame("main"), frame("spin"), frame("sleep_a_bit")]
    threads = [{"pid": 1, "tid": 1, "name": "MainThread", "runs": [[0, 75], [1, 25]]}]
    facts = attach_facts(synthetic(threads, frames, [[0, 1], [0, 2]]))
    assert not facts.loader_seen and facts.verdict is None
    assert [(d.name, d.share) for d in facts.doing] == [("spin", 0.75), ("sleep_a_bit", 0.25)]


def test_a_worker_given_as_the_target_is_named_with_its_parent():
    frames = [frame("_worker_loop", WORKER), frame("Queue.get", QUEUES)]
    threads = [{"pid": 7, "tid": 7, "name": "MainThread", "runs": [[0, 100]]}]
    processes = [{"pid": 7, "parent": 3}]
    facts = attach_facts(synthetic(threads, frames, [[0, 1]], (7,), processes))
    assert not facts.loader_seen and facts.worker_of == 3


def test_a_thread_pool_loader_counts_its_threads_as_workers():
    frames = [
        frame("main"),
        frame("ThreadedDataset.__next__"),
        frame("Thread.run", "/usr/lib/python3.11/threading.py"),
        frame("Ds.__getitem__", stage="other (__getitem__)"),
        frame("decode_jpeg"),
    ]
    threads = [
        {"pid": 1, "tid": 1, "name": "MainThread", "runs": [[0, 100]]},
        {"pid": 1, "tid": 5, "name": "pool_0", "runs": [[1, 60], [2, 40]]},
    ]
    facts = attach_facts(synthetic(threads, frames, [[0, 1], [2, 3, 4], [2]]))
    assert [(w.kind, w.busy_fraction) for w in facts.workers] == [("thread", 0.6)]
    assert facts.stages[0].name == "decode_jpeg"


def test_the_record_validates_renders_and_gives_the_one_verdict():
    host = {"cores": 2, "memory_bytes": 2**34, "torch": "2.13.0", "cuda": None, "gpu": None}
    record = RunRecord(command="attach", target="pid 27600", host=host)
    capture = fixture_capture("input")
    record.add(attach_capture=capture)
    facts = attach_facts(record.to_dict())
    record.add(attach=attach_summary(facts), stages=attach_stage_rows(facts))
    data = record.to_dict()
    jsonschema.validate(data, record_schema())
    again = RunRecord.from_dict(json.loads(json.dumps(data)))
    assert attach_summary(attach_facts(again.to_dict())) == data["attach"]
    verdict = report_facts(data).verdict
    assert verdict.label == "input-bound"
    assert verdict.values["stall_fraction"] == pytest.approx(43 / 59)
    text = ConsoleRenderer().render(data)
    assert "72.9%" in text and "slow_read" in text
    markdown = MarkdownRenderer().render(data)
    assert "Attached: where the loader's workers spend their time" in markdown
    assert "| `slow_read` | user | 83 | 69.7% |" in markdown


def test_two_attaches_side_by_side_judge_the_data_wait_by_its_interval():
    before = {"command": "attach", "attach_capture": fixture_capture("input")}
    after = {"command": "attach", "attach_capture": fixture_capture("stuck")}
    rows = {row["key"]: row for row in against_facts(after, before)["rows"]}
    wait = rows["attach:data-wait"]
    assert wait["new"]["value"] == 1.0 and wait["old"]["value"] == pytest.approx(43 / 59)
    assert wait["judged"] == "beyond noise"  # [0.94, 1] against [0.60, 0.83]
    assert rows["attach-stage:slow_read"]["judged"] == "in one record only"
    same = against_facts(before, before)["rows"]
    assert {row["judged"] for row in same} == {"inside noise"}
