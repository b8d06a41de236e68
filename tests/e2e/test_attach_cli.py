"""`stallscope attach PID` end to end: the real CLI on a training job started on its own
(``tests/pipelines/attach_training.py``), a job with a stuck worker, and the errors.

The tolerance against the job's own log is wide here so the test cannot flake on a loaded
machine; the tight agreement is measured by ``benchmarks/attach_overhead.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from attach_training import expected_checksum, logged_wait_fraction, read_log

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
SCRIPT = str(PIPELINES / "attach_training.py")
ENV = dict(os.environ, COLUMNS="200")


def start_job(tmp_path: Path, setting: str, steps: int) -> tuple[subprocess.Popen, Path]:
    """The training job in its own session (so the whole tree can be stopped), once it runs."""
    log, ready = tmp_path / f"{setting}.jsonl", tmp_path / f"{setting}.ready"
    job = subprocess.Popen(
        [
            sys.executable,
            SCRIPT,
            "--setting",
            setting,
            "--steps",
            str(steps),
            "--step-log",
            str(log),
        ]
        + ["--ready", str(ready)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        if job.poll() is not None or time.monotonic() > deadline:
            stop(job)
            pytest.fail(f"the training job did not start: {job.stderr.read().decode()[-500:]}")
        time.sleep(0.1)
    return job, log


def stop(job: subprocess.Popen) -> None:
    """Stop the job and every process under it: its session, and the processes that left it
    (torchrun starts each rank in a session of its own)."""
    try:
        family = psutil.Process(job.pid).children(recursive=True)
    except psutil.Error:
        family = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)
    for process in family:
        with contextlib.suppress(psutil.Error):
            process.kill()
    _, alive = psutil.wait_procs(family, timeout=30)
    job.wait(timeout=30)
    assert not alive, f"left behind: {[p.pid for p in alive]}"
    job.stderr.close()


def stallscope(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stallscope", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )


def test_attach_reports_the_jobs_own_data_wait_and_top_worker_function(tmp_path):
    steps = 450
    job, log = start_job(tmp_path, "input", steps)
    out = tmp_path / "attach.json"
    try:
        # The job has its first batch, so its two workers run; read them now, while they surely
        # do: on a loaded machine the job can finish while attach is still writing its report.
        workers = psutil.Process(job.pid).children(recursive=True)
        time.sleep(1.0)  # past the first batches
        proc = stallscope("attach", str(job.pid), "--duration", "5", "--json", str(out))
        assert proc.returncode == 0, proc.stderr
        assert job.wait(timeout=120) == 0, job.stderr.read().decode()[-500:]
        # the job shut its own workers down as it ended: nothing attach did kept one alive
        _, alive = psutil.wait_procs(workers, timeout=10)
        assert len(workers) == 2 and not alive
    finally:
        stop(job)
    record = json.loads(out.read_text())
    assert record["command"] == "attach" and record["target"] == f"pid {job.pid}"
    attach = record["attach"]
    assert attach["pid"] == job.pid and attach["rate_hz"] == 100
    assert isinstance(attach["sampler_errors"], int)
    assert attach["verdict"] == "input-bound"
    logged, done = read_log(str(log))
    start = record["attach_capture"]["started_at"]
    own = logged_wait_fraction(logged, start, start + attach["duration_s"])
    assert abs(attach["data_wait_fraction"] - own) < 0.15, (attach["data_wait_fraction"], own)
    assert len(attach["workers"]) == 2
    assert record["stages"][0]["name"] == "slow_read"
    assert abs(record["stages"][0]["share"] - 0.75) < 0.15
    # the job ran to its end and computed what it computes unobserved
    assert done is not None and done["checksum"] == expected_checksum("input", steps)
    assert len(logged) == steps
    # the record renders again
    report = stallscope("report", str(out))
    assert report.returncode == 0 and "input-bound" in report.stdout


def test_attach_names_a_stuck_worker_and_its_function(tmp_path):
    job, _ = start_job(tmp_path, "stuck", 1000)
    out = tmp_path / "stuck.json"
    try:
        time.sleep(1.0)
        proc = stallscope(
            "attach", str(job.pid), "--duration", "3", "--hang-after", "1.5", "--json", str(out)
        )
        idle_worker = psutil.Process(job.pid).children()[0]
        worker_attach = stallscope("attach", str(idle_worker.pid), "--duration", "1")
    finally:
        stop(job)
    assert proc.returncode == 0, proc.stderr
    stuck = json.loads(out.read_text())["attach"]["stuck"]
    workers = [s for s in stuck if s["role"] == "worker"]
    assert len(workers) == 1 and workers[0]["seconds"] >= 1.5
    assert workers[0]["stack"][-1].startswith("wait_forever ")
    assert "stuck:" in proc.stdout and "wait_forever" in proc.stdout
    # a worker's PID instead of the job's: one sentence naming the job
    assert str(job.pid) in _one_sentence(worker_attach)


def _one_sentence(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_attach_errors_are_one_sentence(tmp_path):
    assert "no process with PID" in _one_sentence(stallscope("attach", str(2**22 + 4321)))
    assert "PID" in _one_sentence(stallscope("attach", "not-a-pid"))
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        message = _one_sentence(stallscope("attach", str(sleeper.pid), "--duration", "1"))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert "not a Python process" in message
    idle = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"],
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        message = _one_sentence(stallscope("attach", str(idle.pid), "--duration", "1"))
    finally:
        idle.kill()
        idle.wait()
    assert "no data loader in sight" in message and "<module>" in message


def test_attach_to_torchrun_samples_every_rank_and_names_the_slowest(tmp_path):
    log = tmp_path / "ddp.jsonl"
    torchrun = Path(sys.executable).parent / "torchrun"
    job = subprocess.Popen(
        [str(torchrun), "--nproc-per-node", "2", SCRIPT, "--setting", "input", "--steps", "400"]
        + ["--step-log", str(log), "--slow-rank", "1", "--ready", str(tmp_path / "ready")],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    out = tmp_path / "ddp.json"
    try:
        deadline = time.monotonic() + 90
        while not all((tmp_path / f"ready.rank{r}").exists() for r in (0, 1)):
            assert job.poll() is None and time.monotonic() < deadline, "torchrun did not start"
            time.sleep(0.2)
        proc = stallscope("attach", str(job.pid), "--duration", "3", "--json", str(out))
    finally:
        stop(job)
    assert proc.returncode == 0, proc.stderr
    attach = json.loads(out.read_text())["attach"]
    ranks = {r["rank"]: r for r in attach["ranks"]}
    assert sorted(ranks) == [0, 1]
    assert ranks[1]["slowest"] and not ranks[0]["slowest"]
    assert ranks[1]["data_wait_fraction"] > ranks[0]["data_wait_fraction"]
    assert len(attach["workers"]) == 4
