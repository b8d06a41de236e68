"""`stallscope doctor` applies code changes in its probes and reports them (issue 18, part 3)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from stallscope.schema import record_schema

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
REPO = PIPELINES.parents[1]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="160")


def test_doctor_reports_applied_code_changes_with_verified_diffs(tmp_path):
    target = tmp_path / "vision_changes.py"
    shutil.copy(PIPELINES / "vision_changes.py", target)  # the diffs name this copy, patched below
    before = target.read_text()
    out = tmp_path / "report"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stallscope",
            "doctor",
            f"{target}:small_pipeline",
            "--out",
            str(out),
            "--skip",
            "check,bench,stages",
            "--budget",
            "4",  # the tuner only gives the pick the changes race: its quality is not read here
            "--changes-budget",
            "3",  # one interleaved round of every change always runs: the race is what is read
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert target.read_text() == before  # the user's file is never touched
    record = json.loads((out / "report.json").read_text())
    jsonschema.validate(record, record_schema())
    changes = {c["id"]: c for c in record["code_changes"]}
    assert {"prefix-cache", "reduced-decode", "integer-transfer", "batch-augment"} <= set(changes)
    for change in changes.values():
        assert change["rounds"] >= 1 and change["speedup"] and change["speedup"] > 0, change
        assert change["side_effect"]["summary"], change
        assert change["verified"] and change["diff"], change
        assert change["apply"] == "patch -p0 < change.diff"
    assert changes["reduced-decode"]["side_effect"]["psnr_db"] > 25
    assert changes["reduced-decode"]["side_effect"]["alters_output"] is True
    assert changes["integer-transfer"]["side_effect"]["max_abs_difference"] < 1e-4
    assert record["code_changes_run"]["rounds"] >= 1
    # Every printed diff applies to the file as it is, and the patched file still runs.
    for change in changes.values():
        diff = tmp_path / f"{change['id']}.diff"
        diff.write_text(change["diff"])
        done = subprocess.run(
            ["patch", "--dry-run", "-p0", "-i", str(diff)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    md = (out / "report.md").read_text()
    assert "Code changes, applied and measured" in md and "```diff" in md
    assert "Code changes, applied and measured" in proc.stdout


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch(1)")
def test_patched_look_alike_runs(tmp_path):
    """The prefix-cache diff, applied for real, gives a module whose loader yields the
    same batches."""
    target = tmp_path / "vision_changes.py"
    shutil.copy(PIPELINES / "vision_changes.py", target)
    script = f"""
import sys, random, torch
sys.path.insert(0, {str(tmp_path)!r})
from stallscope.target import load_target
from stallscope.changes.anatomy import examine
from stallscope.changes.prefix_cache import PrefixCache
pipeline = load_target({str(target)!r} + ":small_pipeline")
anatomy = examine(pipeline.dataset)
change = PrefixCache()
assert change.applies(anatomy, pipeline) is None
print(change.patch(anatomy, pipeline).diff)
"""
    made = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    (tmp_path / "cache.diff").write_text(made.stdout)
    applied = subprocess.run(
        ["patch", "-p0", "-i", "cache.diff"], cwd=tmp_path, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    run = f"""
import sys, shutil, tempfile, random, torch
sys.path.insert(0, {str(tmp_path)!r})
import vision_changes as v
v._PREFIX_CACHE.folder = tempfile.mkdtemp()
from torch.utils.data import DataLoader
ds = v.dataset(4)
epochs = []
for epoch in range(2):
    torch.manual_seed(0)
    random.seed(0)
    epochs.append([b[0] for b in DataLoader(ds, batch_size=2)])
    if epoch == 0:
        calls = v.decode_calls
workers = [b[0] for b in DataLoader(ds, batch_size=2, num_workers=2)]  # workers read the same files
print(v.decode_calls == calls, all(torch.equal(a, b) for a, b in zip(*epochs)), len(workers))
shutil.rmtree(v._PREFIX_CACHE.folder)
"""
    ran = subprocess.run(
        [sys.executable, "-c", run],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["True", "True", "2"], ran.stdout
