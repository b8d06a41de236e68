"""`stallscope profile TARGET` end to end: the CLI, its JSON record and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from stallscope.analysis.training import profile_recommendations, verdict_for
from stallscope.commands.profile import main

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
TARGET = str(PIPELINES / "profile_synthetic.py")


def test_profile_cli_writes_the_profile_record(tmp_path):
    out = tmp_path / "run.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stallscope",
            "profile",
            f"{TARGET}:input_bound",
            "--steps",
            "15",
            "--warmup",
            "2",
            "--num-workers",
            "0",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, COLUMNS="200"),
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    assert record["schema"] == 1 and record["command"] == "profile"
    for key in (
        "stall_fraction",
        "verdict",
        "steps",
        "gpu_util",
        "what_if_speedup",
        "step_timeline",
        "first_batch_s",
        "occupancy",
        "resources",
        "ranks",
    ):
        assert key in record, key
    assert (
        record["verdict"] == "input-bound" and record["steps"] == 15 and record["total_steps"] == 17
    )
    assert len(record["step_timeline"]["data_ms"]) == 17
    if torch.cuda.is_available():  # the default device, synchronised at each step boundary
        assert record["device"] == "cuda" and record["sync"]["mode"] == "cuda"
    else:
        assert record["device"] == "cpu" and record["sync"] is None
    assert record["config"]["num_workers"] == 0
    assert "recommendations" not in record and "advice" not in record  # analysis gives them
    recs = profile_recommendations(record)
    assert recs[0]["handoff"] == f"stallscope tune {TARGET}:input_bound"
    for rec in recs:
        assert rec["measured"] and rec["expected_gain"]
    assert "input-bound" in proc.stdout and f"stallscope tune {TARGET}:input_bound" in proc.stdout


def test_profile_compute_bound_with_workers(tmp_path, capsys):
    out = tmp_path / "run.json"
    code = main(
        [
            f"{TARGET}:compute_bound",
            "--steps",
            "10",
            "--warmup",
            "1",
            "--num-workers",
            "1",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    record = json.loads(out.read_text())
    assert record["config"]["num_workers"] == 1
    # The buffer of one worker's prefetch is read, and the verdict is the rule's for the fraction
    # measured. What that fraction is on the real clock moves with the machine's load (ten 40 ms
    # steps: one 80 ms stall of the worker makes it input-bound), so no figure is asserted here:
    # a compute-dominated target measured in process is test_training_runner.py's, and a full
    # buffer under a slow model test_training_watch.py's.
    occupancy = record["occupancy"]
    assert occupancy is not None and occupancy["capacity"] == 2
    assert 0.0 <= occupancy["mean_fraction"] <= 1.0, occupancy
    assert record["verdict"] == verdict_for(record["stall_fraction"]), record["stall_fraction"]
    assert capsys.readouterr().out == ""


def test_profile_errors_are_one_sentence_and_exit_2(capsys):
    def err() -> str:
        return " ".join(capsys.readouterr().err.split())  # rich wraps long lines

    assert main([f"{TARGET}:no_train_step", "--steps", "3"]) == 2
    assert "has no train_step" in err()
    assert main([f"{TARGET}:failing_step", "--steps", "3", "--warmup", "0"]) == 2
    text = err()
    assert "train_step raised ValueError: loss is NaN at step 0" in text and "Traceback" not in text
    if not torch.cuda.is_available():  # where there is one, --device cuda is a valid request
        assert main([f"{TARGET}:input_bound", "--device", "cuda"]) == 2
        assert "no CUDA device" in err()
    assert main([f"{TARGET}:input_bound", "--steps", "0"]) == 2
    assert "--steps must be at least 1" in err()
    assert main([f"{TARGET}:input_bound", "--num-workers", "-1"]) == 2
    assert "--num-workers must be at least 0" in err()
