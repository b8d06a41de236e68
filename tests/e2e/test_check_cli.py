"""`stallscope check` through the real CLI: exit codes, --json, hangs, Ctrl-C, no orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from interrupts import default_sigint

from stallscope.commands.check import main

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ROOT / "tests" / "pipelines" / "check_datasets.py"
HANG_LINE = next(
    n for n, line in enumerate(TARGETS.read_text().splitlines(), 1) if "# HANG-LINE" in line
)


def _tagged_processes(tag: str) -> list[psutil.Process]:
    """Live processes whose environment carries ``tag`` (the CLI and anything it started)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if (
                proc.environ().get("STALLSCOPE_TEST_TAG") == tag
                and proc.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _cli(args: list[str], tag: str) -> subprocess.Popen:
    env = {**os.environ, "STALLSCOPE_TEST_TAG": tag, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "stallscope", "check", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )


def _assert_no_survivors(tag: str) -> None:
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and _tagged_processes(tag):
        time.sleep(0.1)
    survivors = _tagged_processes(tag)
    for proc in survivors:
        proc.kill()
    assert not survivors, f"processes left behind: {[p.pid for p in survivors]}"


def test_cli_hang_finishes_names_index_and_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "hang.json"
    tag = uuid.uuid4().hex
    started = time.monotonic()
    proc = _cli([f"{TARGETS}:hanging", "--timeout", "2", "--json", str(out)], tag)
    stdout, stderr = proc.communicate(timeout=120)
    wall = time.monotonic() - started
    assert proc.returncode == 1, stderr
    record = json.loads(out.read_text())
    # The check itself (after the interpreter imported torch and the target) ends within
    # its 2 s per-sample timeout plus a few seconds; the wall clock adds interpreter start-up.
    assert record["coverage"]["elapsed_s"] < 2 + 10, record["coverage"]
    assert wall < 2 + 40
    [hang] = [f for f in record["findings"] if f["code"] == "hang"]
    assert hang["evidence"]["index"] == 3
    assert f"check_datasets.py:{HANG_LINE} in __getitem__" in hang["evidence"]["where"]
    assert f"check_datasets.py:{HANG_LINE}" in stdout  # the console summary names it too
    assert record["coverage"]["indices_checked"] == 15
    _assert_no_survivors(tag)


def test_cli_ctrl_c_leaves_a_partial_report_and_no_workers(tmp_path):
    out = tmp_path / "partial.json"
    tag = uuid.uuid4().hex
    proc = _cli([f"{TARGETS}:hanging", "--timeout", "60", "--json", str(out)], tag)
    try:
        # wait until the probe workers exist (one of them is stuck on index 3)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                workers = psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                workers = []
            if len(workers) >= 2:
                break
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    record = json.loads(out.read_text())
    assert record["partial"] is True and record["command"] == "check"
    _assert_no_survivors(tag)


def test_cli_json_codes_and_exit_1_for_errors(tmp_path, capsys):
    out = tmp_path / "bugs.json"
    code = main(
        [
            f"{TARGETS}:many_bugs",
            "--json",
            str(out),
            "--skip",
            "memory-growth,copy-on-write,oversubscription",
        ]
    )
    assert code == 1
    record = json.loads(out.read_text())
    assert record["schema"] == 1 and record["command"] == "check"
    codes = {f["code"]: f for f in record["findings"]}
    assert {"unpicklable", "getitem-error", "duplicate-rng"} <= set(codes)
    for finding in record["findings"]:
        assert set(finding) == {"code", "severity", "message", "evidence", "fix"}
        assert (
            finding["severity"] in {"error", "warning", "info"}
            and finding["message"]
            and finding["fix"]
        )
    assert codes["unpicklable"]["evidence"]["attribute"] == "dataset.transform.fn"
    assert codes["getitem-error"]["evidence"]["index"] == 9
    assert codes["duplicate-rng"]["evidence"]["attributes"][0]["path"] == "dataset.rng"
    assert record["coverage"]["mode"] == "sampled"
    printed = capsys.readouterr().out
    assert "unpicklable" in printed and "getitem-error" in printed and "fix:" in printed


def test_cli_clean_exit_0_and_states_its_coverage(tmp_path, capsys):
    out = tmp_path / "clean.json"
    code = main(
        [
            f"{TARGETS}:clean",
            "--only",
            "getitem-error,collate-error,hang,slow-samples",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    record = json.loads(out.read_text())
    assert record["findings"] == []
    assert record["coverage"]["codes"] == ["getitem-error", "collate-error", "hang", "slow-samples"]
    assert "no problems found in 96 of 96 indices (100.0%)" in " ".join(
        capsys.readouterr().out.split()
    )


def test_cli_three_slow_samples_among_2000_are_caught_at_default_settings(tmp_path):
    # 2,000 items of about 1 ms, three of 400 ms far apart: at default settings every index fits
    # in the budget, so every one is fetched (a fixed sample of 512 used to miss them).
    out = tmp_path / "slow.json"
    proc = _cli([f"{TARGETS}:scattered_slow", "--json", str(out), "--quiet"], uuid.uuid4().hex)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr
    record = json.loads(out.read_text())
    [finding] = [f for f in record["findings"] if f["code"] == "slow-samples"]
    assert sorted(finding["evidence"]["indices"]) == [137, 1021, 1874]
    assert (
        record["coverage"]["indices_checked"] == 2000
        and record["coverage"]["fraction_checked"] == 1.0
    )


def test_cli_shm_free_judges_a_smaller_container(tmp_path):
    out = tmp_path / "shm.json"
    code = main(
        [
            f"{TARGETS}:big_batches",
            "--only",
            "shm-too-small",
            "--shm-free",
            "8",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert code == 1
    [finding] = json.loads(out.read_text())["findings"]
    assert finding["code"] == "shm-too-small"
    assert finding["evidence"]["in_flight_mb"] == 16.0 and finding["evidence"]["shm_free_mb"] == 8.0


@pytest.mark.parametrize(
    "args",
    [
        ["--timeout", "0"],
        ["--budget", "-1"],
        ["--only", "not-a-code"],
        ["--num-workers", "0"],
        ["--start-method", "threads"],
        ["--shm-free", "-1"],
    ],
)
def test_cli_usage_errors_exit_2(args, capsys):
    assert main([f"{TARGETS}:clean", *args, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_cli_missing_target_exit_2(capsys):
    assert main(["tests/pipelines/nope.py:fn"]) == 2
    assert "does not exist" in capsys.readouterr().err
