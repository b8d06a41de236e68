"""ss.check on small real datasets with real worker processes: one test per finding code."""

from __future__ import annotations

import time
from pathlib import Path

import check_datasets as cd
import pytest

import stallscope as ss
from stallscope.checks import CheckResult
from stallscope.checks.rng import duplicated_streams

PIPELINES = Path(cd.__file__)
HANG_LINE = next(
    n for n, line in enumerate(PIPELINES.read_text().splitlines(), 1) if "# HANG-LINE" in line
)


def only(result: CheckResult, code: str):
    found = result.by_code(code)
    assert len(found) == 1, f"expected one {code} finding, got {result.codes}"
    return found[0]


def test_ss_check_is_the_checks_function():
    from stallscope.checks import check

    assert ss.check is check


def test_clean_dataset_gets_no_finding():
    """All ten checks, real workers, a random (per-worker seeded) augmentation: no false alarm."""
    result = ss.check(cd.clean)
    assert not result.errors, [f.message for f in result.findings]
    assert result.codes == [], [f.message for f in result.findings]
    assert result.exit_code == 0
    coverage = result.coverage
    assert coverage["indices_checked"] == 96 and coverage["fraction_checked"] == 1.0
    # Every probe ran, but the stream probe, which has nothing to do on a map-style dataset.
    assert coverage["probes"].pop("sharding") == "not an IterableDataset"
    assert all(status == "done" for status in coverage["probes"].values()), coverage["probes"]
    assert (
        result.probes["pickling"]["roots"][0]["load_checked"] is True
    )  # loaded in a fresh interpreter
    # Observed, not assumed: the pipeline is random, and DataLoader gave every worker its own
    # random / NumPy legacy / torch global stream (this torch seeds all three per worker).
    verdict = duplicated_streams(result.probes["rng"])
    assert verdict["random"] is True
    assert verdict["globals"] == [] and not verdict["across_workers"]


def test_unpicklable_names_attribute_path_and_type_and_probes_fall_back_to_fork():
    result = ss.check(
        cd.lambda_transform, only=["unpicklable", "getitem-error"], start_method="spawn"
    )
    finding = only(result, "unpicklable")
    assert finding.severity == "error"
    assert finding.evidence["attribute"] == "dataset.transform.fn"
    assert finding.evidence["attribute_type"] == "lambda"
    assert "check_datasets.py" in finding.evidence["description"]
    assert "module-level function" in finding.fix
    # the worker probes could not use spawn, and said so
    assert result.coverage["worker_start_method"] == "fork"
    assert any("cannot be pickled for spawn" in note for note in result.coverage["notes"])
    assert result.coverage["indices_checked"] == 32


def test_a_handle_opened_on_first_use_is_not_left_open_by_the_preflight_for_the_check():
    # doctor fetches a first batch in this process before its check: the file a lazy reader
    # opens must stay off the user's dataset, or the check pickles a handle of its own making.
    from stallscope.pipeline.preflight import preflight
    from stallscope.target import load_target

    pipeline = load_target(cd.lazy_handle)
    preflight(pipeline)
    assert pipeline.dataset.handle is None
    result = ss.check(pipeline, only=["unpicklable"], start_method="spawn")
    assert "unpicklable" not in result.codes, [f.message for f in result.findings]
    pipeline.dataset[0]  # opened on the user's object: a real error under spawn
    result = ss.check(pipeline, only=["unpicklable"], start_method="spawn")
    assert only(result, "unpicklable").evidence["attribute"] == "dataset.handle"


def test_unpicklable_when_a_fresh_interpreter_cannot_import_the_class(tmp_path):
    import importlib.util

    module_file = tmp_path / "ghost_pipeline.py"
    module_file.write_text(
        "import torch\n"
        "class GhostDataset(torch.utils.data.Dataset):\n"
        "    def __len__(self):\n        return 8\n"
        "    def __getitem__(self, i):\n        return torch.tensor(i)\n"
    )
    spec = importlib.util.spec_from_file_location("ghost_pipeline", module_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import sys

    sys.modules["ghost_pipeline"] = module  # importable here, not on sys.path for a new interpreter
    try:
        result = ss.check(module.GhostDataset(), only=["unpicklable"], batch_size=4)
    finally:
        del sys.modules["ghost_pipeline"]
    finding = only(result, "unpicklable")
    assert finding.evidence["attribute_type"] == "import"
    assert (
        "ModuleNotFoundError" in finding.evidence["error"]
        and "ghost_pipeline" in finding.evidence["error"]
    )


def test_duplicate_rng_names_the_generator_and_seed_worker_fixes_it():
    result = ss.check(cd.shared_generator, only=["duplicate-rng"])
    finding = only(result, "duplicate-rng")
    evidence = finding.evidence
    assert evidence["identical_across_workers"] is True
    assert (
        evidence["identical_across_epochs"] is True
    )  # re-forked from the same parent state each epoch
    assert [a["path"] for a in evidence["attributes"]] == ["dataset.rng"]
    assert evidence["attributes"][0]["type"] == "numpy.random.Generator"
    assert evidence["fixed_by_seed_worker"] is True
    # the raw streams: both workers hashed the same samples, and with seed_worker they differ
    rng = result.probes["rng"]
    first_epoch = rng["epochs"][0]
    assert first_epoch[0]["digests"] == first_epoch[1]["digests"]
    seeded = rng["with_seed_worker"][0]
    assert seeded[0]["digests"] != seeded[1]["digests"]


def test_duplicate_rng_from_the_samples_when_no_attribute_holds_the_generator():
    result = ss.check(cd.module_generator, only=["duplicate-rng"], start_method="fork")
    finding = only(result, "duplicate-rng")
    assert finding.evidence["identical_across_workers"] is True
    assert finding.evidence["attributes"] == []
    assert (
        finding.evidence["fixed_by_seed_worker"] is False
    )  # out of seed_worker's reach, and the fix says so
    assert "module level" in finding.message


LEAK_LINE = next(
    n for n, line in enumerate(PIPELINES.read_text().splitlines(), 1) if "# LEAK-LINE" in line
)


def test_memory_growth_names_the_leaking_list_and_its_heap_growth():
    result = ss.check(cd.leaky_cache, only=["memory-growth"])
    finding = only(result, "memory-growth")
    evidence = finding.evidence
    assert finding.severity in ("warning", "error")
    assert evidence["cause"] == "python-heap" and evidence["plateaued_after_samples"] is None
    # every sample keeps a 128 KiB NumPy array = 125 MiB per 1,000 samples, all of it on the Python
    # heap
    assert 80 <= evidence["python_heap_mb_per_1000_samples"] <= 170, evidence
    assert evidence["native_mb_per_1000_samples"] < evidence["python_heap_mb_per_1000_samples"] / 2
    assert evidence["growing_attribute"] == "dataset.cache"
    grown = evidence["containers"][0]
    assert grown["entries_before"] == 0 and grown["entries_after"] == evidence["samples_per_worker"]
    assert evidence["allocation_sites"][0]["called_from"] == f"{PIPELINES}:{LEAK_LINE}"
    assert "dataset.cache" in finding.message and "Bound dataset.cache" in finding.fix
    assert not result.by_code("copy-on-write")


def test_native_first_pass_growth_is_not_called_a_leak():
    result = ss.check(cd.shape_cache, only=["memory-growth"])
    finding = only(result, "memory-growth")
    evidence = finding.evidence
    assert finding.severity == "info"
    assert evidence["cause"] == "native-first-pass"
    # 48 shapes x 1 MiB of torch workspace per worker, then nothing new
    assert 30 <= evidence["first_pass_mb"] <= 70, evidence
    assert evidence["plateaued_after_samples"] is not None
    assert evidence["plateaued_after_samples"] <= evidence["pass_samples_per_worker"]
    assert evidence["python_heap_mb_per_1000_samples"] < 2.0
    assert "not a leak" in finding.message and "first-pass growth" in finding.message.lower()


def test_native_leak_that_keeps_growing():
    result = ss.check(cd.native_leak, only=["memory-growth"])
    finding = only(result, "memory-growth")
    evidence = finding.evidence
    assert finding.severity in ("warning", "error")
    assert evidence["cause"] == "native" and evidence["plateaued_after_samples"] is None
    # 256 KiB of tensor per sample = 250 MiB per 1,000 samples, none of it on the Python heap
    assert 150 <= evidence["native_mb_per_1000_samples"] <= 350, evidence
    assert evidence["python_heap_mb_per_1000_samples"] < 10
    assert evidence["growing_attribute"] is None
    assert "native leak" in finding.message


def test_copy_on_write_of_python_objects_after_fork():
    result = ss.check(cd.annotations, only=["copy-on-write", "memory-growth"], start_method="fork")
    finding = only(result, "copy-on-write")
    evidence = finding.evidence
    assert evidence["mb_per_worker"] >= 4.0
    assert evidence["parent_python_heap_mb"] >= 8.0
    assert evidence["python_objects"] > 100_000
    # shared pages turned private without new anonymous memory (RSS may rise as a worker maps
    # library code lazily: NOTE [copy-on-write measure] in checks/memory.py)
    assert max(evidence["anonymous_change_mb"]) < evidence["mb_per_worker"] / 2
    assert not result.by_code("memory-growth")


def test_slow_samples_indices_and_times():
    result = ss.check(cd.slow_samples, only=["slow-samples"])
    finding = only(result, "slow-samples")
    assert sorted(finding.evidence["indices"]) == [5, 17]
    assert all(s >= 0.2 for s in finding.evidence["seconds"] + finding.evidence["retimed_seconds"])
    assert finding.evidence["checked"] == 64


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_hang_names_index_and_line_and_finishes(start_method):
    # Index 3 waits forever: that the check returns at all is the proof it finishes (the suite's
    # per-test timeout stops a check that does not).
    result = ss.check(
        cd.hanging, only=["hang", "getitem-error"], timeout=1.5, start_method=start_method
    )
    finding = only(result, "hang")
    assert finding.evidence["index"] == 3
    # declared on the timeout asked for, and confirmed by the worker's own stack
    assert finding.evidence["timeout_s"] == 1.5 and finding.evidence["confirmed"]
    assert finding.evidence["where"].split(" in ")[0].endswith(f"check_datasets.py:{HANG_LINE}")
    assert finding.evidence["where"].endswith("in __getitem__")
    assert f"check_datasets.py:{HANG_LINE}" in finding.message
    # every other index was still checked after the hung worker was replaced
    assert result.coverage["indices_checked"] == 15


def test_getitem_error_index_type_message():
    result = ss.check(cd.raising, only=["getitem-error", "hang"])
    finding = only(result, "getitem-error")
    assert finding.evidence["index"] == 6
    assert finding.evidence["type"] == "KeyError"
    assert finding.evidence["message"] == "KeyError: 6"
    assert finding.evidence["where"].startswith(str(PIPELINES))
    assert finding.evidence["count"] == 1 and finding.evidence["checked"] == 32
    assert result.exit_code == 1


def test_worker_crash_names_the_index_and_signal():
    result = ss.check(cd.crashing, only=["getitem-error", "hang"])
    finding = only(result, "getitem-error")
    assert finding.evidence["index"] == 4 and finding.evidence["type"] == "WorkerCrash"
    assert "SIGSEGV" in finding.message
    assert (
        "check_datasets.py" in finding.evidence["where"]
    )  # faulthandler's dump of the dying worker
    assert result.coverage["indices_checked"] == 16  # a fresh worker took over the rest


def test_collate_error_names_the_shapes():
    result = ss.check(cd.ragged, only=["collate-error"])
    finding = only(result, "collate-error")
    structures = {s["structure"] for s in finding.evidence["item_structures"]}
    assert len(structures) >= 2, structures  # items of different lengths in one batch
    assert structures <= {
        "tuple(Tensor[3] float32, int)",
        "tuple(Tensor[4] float32, int)",
        "tuple(Tensor[5] float32, int)",
    }
    assert "default_collate" in finding.evidence["collate_fn"]


def test_shm_too_small_with_a_small_dev_shm():
    result = ss.check(cd.big_batches, only=["shm-too-small"], shm_free_bytes=8 * 1024 * 1024)
    finding = only(result, "shm-too-small")
    assert finding.severity == "error"
    assert (
        finding.evidence["batch_mb"] == 4.0
    )  # 16 items × 256 KiB, measured on real batches in workers
    assert finding.evidence["in_flight_mb"] == 16.0
    roomy = ss.check(cd.big_batches, only=["shm-too-small"], shm_free_bytes=1024 * 1024 * 1024)
    assert roomy.codes == []


def test_oversubscription_from_worker_threads(monkeypatch):
    monkeypatch.setenv("STALLSCOPE_CORES", "2")
    result = ss.check(cd.thread_hungry, only=["oversubscription"])
    finding = only(result, "oversubscription")
    assert finding.evidence["threads_per_worker"] == 4
    assert finding.evidence["pools"]["torch"] == 4
    assert finding.evidence["num_workers"] == 2  # the user's DataLoader setting
    assert finding.evidence["demand"] == 8 and finding.evidence["cores"] == 2


def test_budget_bounds_a_slow_dataset():
    started = time.monotonic()
    result = ss.check(cd.sleepy, budget=3.0, timeout=2.0, skip=["unpicklable"])
    elapsed = time.monotonic() - started
    # Checking every sample sleeps 2,000 × 20 ms over the check's 2 workers: 20 s at the least.
    # The check stopped well before that, on the budget it was given.
    assert elapsed < 2000 * 0.02 / 2
    coverage = result.coverage
    assert coverage["budget_s"] == 3.0 and coverage["num_workers"] == 2
    assert 0 < coverage["indices_checked"] < coverage["dataset_length"]
    assert coverage["fraction_checked"] < 1.0
    assert not result.errors


def test_in_process_trials_leave_a_lazy_handle_off_the_dataset_spawn_workers_get():
    # A sweep measures w=0 in this process before its worker configs: the file the reader opens
    # on first use must land on a copy, or the spawn trial after it cannot pickle the dataset
    # (an h5py reader failed 'h5py objects cannot be pickled' at w=2 under spawn).
    from stallscope.target import load_target
    from stallscope.tuning.profiling import profile_pipeline

    pipeline = load_target(cd.lazy_handle)
    profile_pipeline(pipeline, max_seconds=0.2)
    _sweep_in_process_then_spawn(pipeline)
    # A batched-fetch trial in this process (the tuner's w=0 batched variant) fetches from a copy.
    from stallscope.pipeline.loaders import build_loader

    batched = build_loader(pipeline, pipeline.baseline.replace(num_workers=0, batched_fetch=True))
    next(iter(batched))
    assert pipeline.dataset.handle is None


def test_in_process_trials_of_the_users_own_loader_class_leave_a_lazy_handle_off_its_dataset():
    # The same for a DataLoader subclass given as it is: its trials are copies of it, and a w=0
    # copy fetches from a copy of the dataset, not from the one the spawn trial pickles.
    from stallscope.target import load_target

    pipeline = load_target(cd.lazy_handle_own_loader())
    assert type(pipeline.kind).__name__ == "CopiedLoaderKind"
    _sweep_in_process_then_spawn(pipeline)


def _sweep_in_process_then_spawn(pipeline) -> None:
    """w=0 then a spawn trial: both measured, and the user's dataset still holds no handle."""
    from stallscope.throughput.sweep import bench

    result = bench(
        pipeline, num_workers=[0, 1], multiprocessing_context="spawn", repeats=1, min_window_s=0.2
    )
    assert [r.error for r in result.results] == [None, None]
    assert pipeline.dataset.handle is None
