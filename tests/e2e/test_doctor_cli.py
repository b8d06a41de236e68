"""`stallscope doctor`: check + sweep + stages + tune in one report folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import psutil
import pytest
from _cli import run_stallscope
from interrupts import default_sigint

from stallscope.commands import doctor as doctor_command
from stallscope.schema import record_schema

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="160")


def test_doctor_writes_one_complete_report(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stallscope",
            "doctor",
            f"{PIPELINES}/bench_sleepy.py:sleepy_dict",
            "--out",
            str(out),
            "--budget",
            "10",
            "--repeats",
            "1",
            "--num-workers",
            "0,2",
            "--check-budget",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=_env(),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads((out / "report.json").read_text())
    jsonschema.validate(record, record_schema())
    assert record["command"] == "doctor"
    # Every step contributed its section.
    for key in (
        "findings",
        "results",
        "scaling",
        "stages",
        "best",
        "baseline",
        "trials",
        "dataset",
    ):
        assert key in record, key
    assert not any(f["severity"] == "error" for f in record["findings"])
    # One winner: the sweep's best raced the tuner's finalists in the same interleaved rounds.
    sweep_best = record["results"][record["scaling"]["best_index"]]["config"]
    best = record["best"]
    raced = {row["label"]: row for row in best["head_to_head"]}
    assert best["rounds"] >= 1 and raced, best
    assert any(row["config"] == sweep_best for row in raced.values()), (sweep_best, list(raced))
    assert {row["role"] for row in raced.values() if row["config"] == sweep_best} <= {
        "sweep-best",
        "baseline",
    }
    pick = dict(
        best["config"],
        persistent_workers=False,
        multiprocessing_context=sweep_best["multiprocessing_context"],
    )
    assert any(dict(row["config"], persistent_workers=False) == pick for row in raced.values())
    if best["rounds"] < 2:
        assert best["confidence"] is None
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert "samples/s" in md and "<table" in html
    # The verdict first, with the code to set, then the evidence.
    assert proc.stdout.index("Verdict") < proc.stdout.index("DataLoader(")
    assert proc.stdout.index("DataLoader(") < proc.stdout.index("Evidence")


def test_doctor_exit_1_on_error_findings(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stallscope",
            "doctor",
            f"{PIPELINES}/check_datasets.py:lambda_transform",
            "--out",
            str(out),
            "--skip",
            "bench,stages,tune",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert proc.returncode == 1, proc.stderr
    codes = {f["code"] for f in json.loads((out / "report.json").read_text())["findings"]}
    assert "unpicklable" in codes


def test_doctor_bad_skip_and_budgets_are_usage_errors(tmp_path, capsys):
    # Refused before any target is loaded: one sentence each, exit 2.
    assert doctor_command.main(["--skip", "lunch", "--out", str(tmp_path)]) == 2
    assert "not a step" in " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    for flag in ("--check-budget", "--changes-budget"):
        assert doctor_command.main([flag, "0", "--out", str(tmp_path)]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"{flag} must be positive" in err and "Traceback" not in err
    assert doctor_command.main(["--num-workers", "2,-1", "--out", str(tmp_path)]) == 2
    assert "worker counts of 0 or more" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("command", ["bench", "doctor"])
def test_ctrl_c_leaves_partial_report_and_no_orphans(tmp_path, command):
    out = tmp_path / "r.json"
    args = [
        sys.executable,
        "-m",
        "stallscope",
        command,
        f"{PIPELINES}/bench_sleepy.py:sleepy_dict",
        "--json",
        str(out),
    ]
    if command == "bench":
        args += ["--num-workers", "2,4", "--repeats", "50"]
    else:
        args += ["--out", str(tmp_path / "report"), "--skip", "check,stages,tune"]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        preexec_fn=default_sigint,
    )
    try:
        # Wait until workers are running, then interrupt as a terminal's Ctrl-C would.
        parent = psutil.Process(proc.pid)

        def wait_for_workers() -> list[psutil.Process]:
            deadline = time.monotonic() + 60
            found: list[psutil.Process] = []
            while time.monotonic() < deadline and len(found) < 2:
                time.sleep(0.1)
                found = parent.children(recursive=True)
            return found

        assert len(wait_for_workers()) >= 2, "no workers started"
        time.sleep(4.0)  # let a measurement or two complete...
        descendants = wait_for_workers()  # ...and interrupt the next one mid-flight
        assert len(descendants) >= 2
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    partial = json.loads(out.read_text())
    assert partial["partial"] is True
    assert partial["results"], "the configs measured before Ctrl-C are in the partial report"
    _, alive = psutil.wait_procs(descendants, timeout=5)
    assert not alive, f"left behind: {[p.pid for p in alive]}"


def test_doctor_on_a_pipeline_whose_forked_workers_hang_after_use_says_so_and_measures_in_process(
    tmp_path,
):
    # NOTE [fork after use]: doctor runs the pipeline in its own process first, so the check's
    # forked workers hang at their first item; a fresh interpreter's worker returns it. The
    # finding says so, and the sweep and the tuner measure no config with workers.
    out = tmp_path / "report"
    proc = run_stallscope(
        "doctor",
        f"{PIPELINES}/fork_after_use.py:make_loader",
        "--out",
        str(out),
        "--budget",
        "4",
        "--repeats",
        "1",
        "--timeout",
        "3",
        "--skip",
        "changes,stages",
        timeout=400,
        columns=160,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads((out / "report.json").read_text())
    jsonschema.validate(record, record_schema())
    [hang] = [f for f in record["findings"] if f["code"] == "hang"]
    assert hang["severity"] == "warning" and hang["evidence"]["cause"] == "fork-after-use"
    assert hang["evidence"]["fork_control"]["returned"] is True
    assert "engine-loop" in hang["evidence"]["threads_at_fork"]
    assert "fork_after_use.py" in hang["evidence"]["where"]
    assert "engine-loop" in hang["message"] and "forkserver" in hang["fix"]
    assert {r["config"]["num_workers"] for r in record["results"]} == {0}
    assert {t["config"]["num_workers"] for t in record["trials"]} == {0}
    [skipped] = [n for n in record["not_run"] if n["step"] == "configs with worker processes"]
    assert "hang" in skipped["why"]
    assert "configs with worker processes: workers forked from this process hang" in proc.stdout
