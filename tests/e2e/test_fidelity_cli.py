"""The real CLI on real-shape loaders: the user's batches in bench, and emitted code that keeps
the user's arguments, changes only tuned knobs, runs, and yields the user's batches."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader

from stallscope.commands.tune import emitted_config, emitted_text
from stallscope.pipeline.batching import same_batch
from stallscope.render.loader_code import render_diff, render_python
from stallscope.render.loader_snippet import PLACEHOLDER, snippet_for_record
from stallscope.runtime.processes import shutdown_iterator

PIPELINES = (
    "real_translation",
    "real_detection",
    "real_audio",
)  # imported in the tests: detection loads OpenCV
# The tuned knobs, DataLoader arguments and beyond (threads in the main process or in each worker,
# batched fetch).
KNOBS = {
    "num_workers",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory",
    "in_order",
    "multiprocessing_context",
    "torch_threads",
    "worker_threads",
    "batched_fetch",
}
# What each emitted call must keep, as the user wrote it: objects that have no importable name are
# taken from the user's own loader, built by the target factory (``yours = make_loader()``).
KEPT = {
    "real_translation": ["batch_sampler=yours.batch_sampler", "collate_fn=yours.collate_fn"],
    "real_detection": [
        "batch_size=8",
        "shuffle=True",
        "collate_fn=collate_fn",
        "worker_init_fn=seed_worker",
        "generator=yours.generator",
    ],
    "real_audio": ["batch_size=6", "shuffle=True", "drop_last=True", "collate_fn=yours.collate_fn"],
}


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stallscope", *args], capture_output=True, text=True, timeout=timeout
    )


def _target(pipelines_dir, name: str) -> str:
    return f"{pipelines_dir / (name + '.py')}:make_loader"


def test_bench_measures_the_token_buckets_and_reports_batches_per_second(tmp_path, pipelines_dir):
    # Forked workers: how a batch sampler's batches are counted does not depend on the start
    # method (bench under spawn: test_bench_cli.py, test_threads_cli.py).
    out = tmp_path / "bench.json"
    proc = _cli(
        "bench",
        _target(pipelines_dir, "real_translation"),
        "--num-workers",
        "0,1",
        "--repeats",
        "1",
        "--window",
        "0.5",
        "--start-method",
        "fork",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "batches/s" in proc.stdout and "Batches come from your batch_sampler" in proc.stdout
    record = json.loads(out.read_text())
    sizes = record["loader"]["batch_sizes"]
    assert (
        record["loader"]["batching"] == "batch_sampler"
        and record["dataset"]["batching"] == "batch_sampler"
    )
    assert sizes["min"] < sizes["max"]
    for row in record["results"]:
        per_batch = row["samples_measured"] / row["batches_measured"]
        assert sizes["min"] <= per_batch <= sizes["max"] and per_batch > 1.5  # never batches of one
        ratio = row["samples_per_s"]["median"] / row["batches_per_s"]["median"]
        assert sizes["min"] <= ratio <= sizes["max"]


def test_batch_size_flags_cannot_override_a_batch_sampler(pipelines_dir, capsys):
    # Refused after the target is loaded, before anything is measured: in-process, one sentence.
    from stallscope.commands import bench as bench_command
    from stallscope.commands import tune as tune_command

    target = _target(pipelines_dir, "real_translation")
    for main, args in (
        (bench_command.main, [target, "--batch-size", "8"]),
        (tune_command.main, [target, "--tune-batch-size", "--budget", "5"]),
        (bench_command.main, [target, "--batch-sizes", "8,16"]),
    ):
        assert main([*args, "--quiet"]) == 2, args
        err = capsys.readouterr().err
        assert "batch_sampler" in err and "Traceback" not in err, (args, err)


def _two_batches(loader) -> list:
    if getattr(loader, "in_order", True) is False:
        # Batches overtaking each other is what in_order=False is for: compare the contents in
        # the sampler's order, which is what the emitted call must keep.
        loader.in_order = True
        if hasattr(loader, "iterator"):
            shutdown_iterator(loader.iterator)
            loader.iterator = DataLoader.__iter__(loader)
    if hasattr(
        loader, "iterator"
    ):  # real_detection's InfiniteDataLoader: its iterator started in __init__
        try:
            return [next(loader.iterator) for _ in range(2)]
        finally:
            shutdown_iterator(loader.iterator)
    torch.manual_seed(
        0
    )  # an unseeded shuffle draws from the global RNG: same draw for both loaders
    iterator = iter(loader)
    try:
        return [next(iterator) for _ in range(2)]
    finally:
        shutdown_iterator(iterator)


def _structure(batch):
    if isinstance(batch, torch.Tensor):
        return ("tensor", batch.dtype, batch.dim(), batch.shape[1:] if batch.dim() > 1 else ())
    if isinstance(batch, dict):
        return {k: _structure(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return (type(batch).__name__, [_structure(v) for v in batch])
    return type(batch).__name__


@pytest.mark.parametrize("name", PIPELINES)
def test_emitted_python_keeps_the_users_arguments_and_yields_their_batches(
    tmp_path, pipelines_dir, name
):
    module = importlib.import_module(name)
    out = tmp_path / "tune.json"
    proc = _cli(
        "tune",
        _target(pipelines_dir, name),
        "--budget",
        "4",  # the emitted code is read, whichever config the tuner picks
        "--emit",
        "python",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    if name != "real_translation":
        assert record["best"]["config"]["batch_size"] == record["baseline"]["config"]["batch_size"]
    chosen, _ = emitted_config(
        _target(pipelines_dir, name), record
    )  # the pick, or yours when within noise
    assert proc.stdout == emitted_text(_target(pipelines_dir, name), record, "python")
    # The call as emitted, whichever config that is, and the DataLoader call rebuilt with one more
    # worker than yours: the first is the user's factory (it takes num_workers: NOTE [a
    # DataLoader's factory]), the second keeps the user's arguments and changes only tuned knobs;
    # each runs and yields their batches.
    baseline = record["baseline"]["config"]
    more = {**baseline, "num_workers": baseline["num_workers"] + 1, "prefetch_factor": 2}
    rebuilt = snippet_for_record(record, more, form="rebuild")
    assert rebuilt.form == "call" and rebuilt.changed and set(rebuilt.changed) <= KNOBS
    emitted = snippet_for_record(record, chosen.to_dict())
    assert emitted.form == "factory"
    changed = chosen.num_workers != baseline["num_workers"]
    call = f"make_loader(\n    num_workers={chosen.num_workers},  # was " if changed else ""
    assert call in proc.stdout and "DataLoader(" not in proc.stdout, proc.stdout
    if not changed:
        assert proc.stdout.endswith("\nloader = make_loader()\n"), proc.stdout  # your call
    _assert_runs_and_yields_their_batches(name, module, proc.stdout, chosen.num_workers)
    text = render_python(rebuilt)
    _assert_keeps_the_users_call(name, text, rebuilt)
    _assert_runs_and_yields_their_batches(name, module, text, baseline["num_workers"] + 1)


def _assert_keeps_the_users_call(name: str, code: str, snippet) -> None:
    for argument in KEPT[name]:
        assert f"    {argument}," in code, (argument, code)
    if name == "real_translation":
        assert "batch_size=" not in code  # their batch sampler decides: never a batch size
    assert set(snippet.changed) <= KNOBS | {
        "worker_init_fn"
    }  # only tuned knobs (and seeding) change
    assert (
        re.search(rf"^from {name} import .*\bmake_loader\b", code, re.M)
        and "yours = make_loader()\n" in code
    )
    assert not PLACEHOLDER.search(code)  # executable as it stands, from the target's folder


def _assert_runs_and_yields_their_batches(name, module, code, workers: int) -> None:
    namespace: dict = {}
    exec(compile(code, f"<emitted for {name}>", "exec"), namespace)
    yours = namespace.get("yours")
    if hasattr(yours, "iterator"):  # their InfiniteDataLoader started workers in __init__
        shutdown_iterator(yours.iterator)
    emitted = namespace["loader"]
    assert emitted.num_workers == workers
    got = _two_batches(emitted)
    want = _two_batches(module.make_loader())
    assert [_structure(b) for b in got] == [_structure(b) for b in want]
    if name == "real_detection":
        # Their shuffle draws from their generator (``yours.generator``), which their own loader
        # advanced when it started its iterator in __init__: other images, from the same dataset.
        assert {p.rsplit("/", 1)[0] for b in got for p in b[2]} == {
            p.rsplit("/", 1)[0] for b in want for p in b[2]
        }
        assert [b[0].shape for b in got] == [b[0].shape for b in want]
    else:
        assert all(
            same_batch(a, b) for a, b in zip(got, want)
        )  # deterministic samples: identical batches


def test_emit_diff_lists_only_the_keyword_arguments_to_change(tmp_path, pipelines_dir):
    out = tmp_path / "tune.json"
    proc = _cli(
        "tune",
        _target(pipelines_dir, "real_audio"),
        "--budget",
        "4",
        "--emit",
        "diff",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    emitted, comment = emitted_config(
        _target(pipelines_dir, "real_audio"), record
    )  # the pick, or yours
    snippet = snippet_for_record(record, emitted.to_dict())
    assert proc.stdout == render_diff(
        snippet, comment=comment
    )  # the same builder as every other view
    changed = [line for line in proc.stdout.splitlines() if line[:1] in "+-" and "=" in line]
    names = {line[1:].strip().split("=")[0] for line in changed if not line.startswith("+import")}
    assert names == set(snippet.changed)
    assert names <= KNOBS | {"worker_init_fn"}
    assert not names & {
        "collate_fn",
        "batch_size",
        "shuffle",
        "drop_last",
        "batch_sampler",
        "sampler",
    }
