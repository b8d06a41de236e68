"""Exit codes as the README documents them, for every command, through the real CLI.

0 success; 1 error-level findings (``check``, ``doctor``) or ``compare``'s failed gate; 2 bad usage,
a target that cannot be loaded, or a pipeline that cannot be measured; 130 Ctrl-C (tested in
test_doctor_cli.py, test_check_cli.py and unit/test_commands_interrupts.py). Every 2 comes with one
sentence on stderr and no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
MISSING = f"{PIPELINES}/no_such_pipeline.py:make"
RAISES = f"{PIPELINES}/bench_errors.py:raises_always"  # every item raises OSError

COMMANDS = ["bench", "tune", "check", "stages", "profile", "doctor", "compare", "report"]
LOADS_PIPELINES = [c for c in COMMANDS if c != "report"]


def _args(command: str, target: str, tmp_path: Path) -> list[str]:
    """The command on ``target`` with the smallest budgets it takes."""
    small = {
        "bench": ["--num-workers", "0", "--repeats", "1", "--window", "0.2"],
        "tune": ["--budget", "5"],
        "check": ["--budget", "5", "--json", str(tmp_path / "check.json")],
        "stages": ["--samples", "16", "--hotspots", "0", "--no-differential"],
        "profile": ["--steps", "5", "--num-workers", "0"],
        "doctor": ["--budget", "5", "--repeats", "1", "--out", str(tmp_path / "report")],
        "compare": ["--budget", "5", "--window", "0.2", "--no-stages"],
        "report": [],
    }[command]
    targets = [target, target] if command == "compare" else [target]
    return [command, *targets, *small, "--quiet"]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "stallscope", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=PIPELINES.parent.parent,
    )


def _one_sentence(stderr: str, *words: str) -> None:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    text = " ".join(stderr.split())  # rich wraps long lines
    assert len(stderr.strip().splitlines()) <= 3, stderr
    for word in words:
        assert word in text, (word, stderr)


@pytest.mark.parametrize("command", COMMANDS)
def test_bad_usage_exits_2(command, tmp_path):
    target = str(tmp_path / "run.json") if command == "report" else MISSING
    done = _run([*_args(command, target, tmp_path), "--no-such-option"])
    assert done.returncode == 2, done.stderr
    _one_sentence(done.stderr, "unrecognized arguments: --no-such-option")


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_target_exits_2(command, tmp_path):
    target = str(tmp_path / "no_such_run.json") if command == "report" else MISSING
    done = _run(_args(command, target, tmp_path))
    assert done.returncode == 2, done.stderr
    _one_sentence(done.stderr, "no_such_")


@pytest.mark.parametrize("command", [c for c in LOADS_PIPELINES if c != "check"])
def test_dataset_that_always_raises_exits_2(command, tmp_path):
    done = _run(_args(command, RAISES, tmp_path))
    assert done.returncode == 2, done.stderr
    _one_sentence(done.stderr, "OSError: cannot read shard for record")


def test_check_reports_an_always_raising_dataset_as_an_error_finding(tmp_path):
    # Finding broken samples is check's job: a finding and exit 1, not a failure of the command.
    done = _run(_args("check", RAISES, tmp_path))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    findings = json.loads((tmp_path / "check.json").read_text())["findings"]
    assert any(f["code"] == "getitem-error" and f["severity"] == "error" for f in findings), (
        findings
    )


def test_doctor_exits_2_when_a_step_cannot_measure_the_pipeline(tmp_path):
    # dataset[200] raises: the checks report it (an error finding) and the sweep cannot measure the
    # pipeline; the pipeline failure decides the code, and the report keeps what was measured.
    out = tmp_path / "report"
    done = _run(
        [
            "doctor",
            f"{PIPELINES}/bench_errors.py:raises_later",
            "--skip",
            "stages,tune",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert done.returncode == 2, done.stderr
    _one_sentence(
        done.stderr, "bench could not measure the pipeline", "ValueError: corrupt record 200"
    )
    record = json.loads((out / "report.json").read_text())
    assert [f["step"] for f in record["step_failures"]] == ["bench"]
    assert "getitem-error" in {f["code"] for f in record["findings"]}
