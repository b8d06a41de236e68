"""`stallscope tune` end to end: a real subprocess on a tiny sleep-based pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema

from stallscope.analysis import recommendations
from stallscope.commands import tune as tune_command
from stallscope.config import LoaderConfig

BUDGET = 10.0


def test_tune_cli_json_and_yaml(tmp_path, pipelines_dir):
    out = tmp_path / "tune.json"
    target = f"{pipelines_dir / 'tune_pipelines.py'}:waiting_loader"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stallscope",
            "tune",
            target,
            "--budget",
            str(BUDGET),
            "--json",
            str(out),
            "--emit",
            "yaml",
        ],
        capture_output=True,
        text=True,
        timeout=BUDGET + 60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["command"] == "tune" and record["schema"] == 1
    assert {"baseline", "best", "trials", "tuning_seconds"} <= set(record)
    assert record["tuning_seconds"] <= BUDGET + 5
    # The user's loader (1 worker, 4 ms of sleep per item) is the baseline; sleeping parallelises.
    assert record["baseline"]["config"]["num_workers"] == 1
    best = record["best"]
    # Fetches overlap: more worker processes, or fetch threads inside them (worker_threads), than
    # the user's one. (How far the tuner goes past 2 depends on the machine's load: the tuner
    # benchmarks measure where it lands.)
    workers, threads = best["config"]["num_workers"], best["config"].get("worker_threads", 0)
    concurrent = max(1, workers) * threads if threads else workers  # w=0 threads×8: the main's
    assert concurrent >= 2 and best["speedup"] > 1.5
    # No confidence without two interleaved rounds (a 10 s budget often has none).
    assert best["confidence"] is None if best["rounds"] < 2 else 0.0 <= best["confidence"] <= 1.0
    assert all({"config", "label", "samples_per_s", "phase"} <= set(t) for t in record["trials"])
    assert record["search"]["region"]["name"] == "latency-bound"
    # stdout carries only the YAML (pipe-able); it matches the record's pick.
    assert LoaderConfig.from_yaml(proc.stdout) == LoaderConfig.from_dict(best["config"])
    # The summary (on stderr) opens with the record's verdict, on the same config.
    assert "Verdict" in proc.stderr
    if record["analysis"]["action"] == "switch":
        assert "Use:" in proc.stderr and "Keep yours:" not in proc.stderr
        assert record["analysis"]["config"] == best["config"]
    else:
        assert record["analysis"]["action"] == "keep-yours", record["analysis"]
        assert "Keep yours:" in proc.stderr and "Use:" not in proc.stderr
        assert record["analysis"]["config"] == record["baseline"]["config"]


def test_tune_cli_emits_python(capsys, pipelines_dir, monkeypatch):
    code = tune_command.main(
        [
            f"{pipelines_dir / 'tune_pipelines.py'}:tensors",
            "--budget",
            "3",
            "--quiet",
            "--emit",
            "python",
        ]
    )
    assert code == 0
    emitted = capsys.readouterr().out
    # The dataset is built inside the target: the code obtains it from the target's own factory.
    assert "from tune_pipelines import tensors\n" in emitted and "yours = tensors()\n" in emitted
    assert '    yours["dataset"],\n' in emitted
    # Executable as it stands from the target's folder, and it defines ``loader``.
    monkeypatch.syspath_prepend(str(pipelines_dir))
    scope: dict = {}
    exec(compile(emitted, "<emitted>", "exec"), scope)
    batch = next(iter(scope["loader"]))
    assert [tuple(t.shape) for t in batch] == [(64, 8), (64,)]


def test_tune_cli_usage_errors(pipelines_dir, capsys):
    assert tune_command.main(["nowhere.py:fn"]) == 2
    assert (
        tune_command.main([f"{pipelines_dir / 'tune_pipelines.py'}:waiting", "--budget", "0"]) == 2
    )
    assert (
        tune_command.main([f"{pipelines_dir / 'tune_pipelines.py'}:waiting", "--emit", "toml"]) == 2
    )
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_slow_loader_reports_rounds_and_no_confidence_without_them(tmp_path, pipelines_dir):
    """0.3 s per batch and 20 s: the plan says up front what fits; below 2 rounds no confidence."""
    from stallscope.schema import record_schema

    out = tmp_path / "slow.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stallscope",
            "tune",
            f"{pipelines_dir / 'tune_pipelines.py'}:slow_loader",
            "--budget",
            "20",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, COLUMNS="200"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    jsonschema.validate(record, record_schema())
    best, plan = record["best"], record["search"]["plan"]
    # Planned from the measured batch time (about 0.3 s), before the first worker ran.
    assert 0.15 <= plan["batch_s"] <= 1.5 and plan["window_batches"] >= 4
    assert plan["measurements_fit"] >= 1 and "fit about" in proc.stdout.split("Region:")[0]
    assert isinstance(best["rounds"], int)
    assert best["rounds"] == record["search"]["rounds"]
    if best["rounds"] < 2:
        assert best["confidence"] is None and best["confirmed"] is False
        # The tuner's evidence says why, the verdict that nothing is claimed.
        assert "Not confirmed: the budget ran out" in proc.stdout
        if record["analysis"]["action"] == "switch":  # keeping yours claims no pick to qualify
            assert f"Not confirmed: {best['rounds']} paired round" in proc.stdout
        assert best["skipped"] and all(s["why"] for s in best["skipped"])
    else:
        assert 0.0 <= best["confidence"] <= 1.0 and best["confirmed"] is True
    # Every finalist in the head-to-head raced at least one round with the others.
    assert all(row["rounds"] >= 1 for row in best["head_to_head"])
    assert record["tuning_seconds"] <= 20 + 10


def test_persistent_workers_comes_with_its_measured_gap(tmp_path, pipelines_dir):
    out = tmp_path / "start.json"
    code = tune_command.main(
        [
            f"{pipelines_dir / 'tune_pipelines.py'}:slow_start_loader",
            "--budget",
            "12",
            "--max-workers",
            "2",
            "--quiet",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    record = json.loads(out.read_text())
    gap = record["search"]["persistent_workers"]
    recs = {r.id: r for r in recommendations(record)}
    if gap is None:  # the budget ran out first: then it is not recommended, and the record says why
        assert (
            not record["best"]["config"]["persistent_workers"] and "persistent-workers" not in recs
        )
        assert any("persistent" in s["label"] for s in record["best"]["skipped"])
        return
    # Each new worker sleeps 0.3 s in worker_init_fn: restarting them shows at the boundary.
    assert gap["gap_without_s"] >= 0.3 > gap["gap_with_s"]
    assert (
        gap["recommended"]
        and recs["persistent-workers"].values["gap_without_s"] == gap["gap_without_s"]
    )
    if record["best"]["keep_baseline"]:  # measured on the user's own config, which stays as it is
        assert gap["measured_on"] == record["baseline"]["label"] and "keep-yours" in recs
    else:
        assert record["best"]["config"]["persistent_workers"]
