"""`stallscope doctor` applies code changes to datasets that work inline in ``__getitem__`` (no
transform list): a PIL + NumPy dataset, an OpenCV loader and an albumentations pipeline, with the
real packages. Asserts that the change applied, that it raced the pick, and that its diff applies
with ``patch`` and the patched file runs under a DataLoader with workers; not the speed-up (the
benchmark measures that)."""

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

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch(1)")


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(PIPELINES), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="160", PYTHONPATH=path)


CASES = {
    # file: (the dataset built from the patched file, changes that must apply with a diff)
    "inline_pil.py": ("InlineJpegDataset(jpeg_paths(8))", {"prefix-cache"}),
    "inline_opencv.py": (
        "OpenCVDataset(jpeg_paths(8))",
        {"prefix-cache", "reduced-decode", "integer-transfer"},
    ),
    "inline_albumentations.py": (
        "AlbumentationsDataset(jpeg_paths(8), train_transform())",
        {"prefix-cache", "reduced-decode"},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_doctor_applies_races_and_prints_a_diff_that_runs(name, tmp_path):
    if name == "inline_albumentations.py":
        pytest.importorskip("albumentations")  # an extra: a machine without it skips the case
    build, expected = CASES[name]
    target = tmp_path / name
    shutil.copy(PIPELINES / name, target)
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
        timeout=500,
        env=_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert target.read_text() == before  # the user's file is never touched
    record = json.loads((out / "report.json").read_text())
    jsonschema.validate(record, record_schema())
    run = record["code_changes_run"]
    assert run["rounds"] >= 1
    assert any("no transform list" in note for note in run["notes"])
    changes = {c["id"]: c for c in record["code_changes"]}
    assert expected <= set(changes), run["not_applied"]
    not_applied = {n["id"]: n["why"] for n in run["not_applied"]}
    assert "batch-augment" in not_applied
    assert ("integer-transfer" in not_applied) != ("integer-transfer" in expected)
    for change_id in expected:
        change = changes[change_id]
        # Raced against the pick in the same rounds: a speed-up exactly where a round paired
        # them (on a loaded machine a window can deliver nothing; that round pairs nothing).
        assert (change["speedup"] is not None) == (change["rounds"] >= 1), change
        assert change["speedup"] is None or change["speedup"] > 0, change
        interval = change["speedup_interval"]  # two rounds or more: a 90 % interval
        assert interval is None or 0 < interval[0] <= interval[1], change
        assert change["verified"] and change["diff"], change
        assert change["side_effect"]["summary"], change
    assert any(changes[c]["speedup"] for c in expected), changes  # the race paired some round
    assert changes["prefix-cache"]["side_effect"]["bytes_per_item"] > 0
    # The prefix-cache diff applies to the file as it is, and the patched file runs in workers,
    # twice (fill, then read), with the batch structure of the original.
    (tmp_path / "change.diff").write_text(changes["prefix-cache"]["diff"])
    applied = subprocess.run(
        ["patch", "-p0", "-i", "change.diff"], cwd=tmp_path, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    module = name[:-3]
    script = f"""
import shutil, sys, tempfile
sys.path.insert(0, {str(tmp_path)!r})
from torch.utils.data import DataLoader
import {module} as m
from {module} import *
m._PREFIX_CACHE.folder = tempfile.mkdtemp()
dataset = {build}
shapes = []
for epoch in range(2):
    for images, labels in DataLoader(dataset, batch_size=4, num_workers=2):
        shapes.append((tuple(images.shape), str(images.dtype), tuple(labels.shape)))
import os
print(len(os.listdir(m._PREFIX_CACHE.folder)), sorted(set(shapes)))
shutil.rmtree(m._PREFIX_CACHE.folder)
"""
    ran = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip() == "8 [((4, 3, 224, 224), 'torch.float32', (4,))]", ran.stdout
    md = (out / "report.md").read_text()
    assert "Code changes, applied and measured" in md and "```diff" in md
