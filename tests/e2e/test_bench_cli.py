"""The real CLI on small real pipelines, with real worker processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from _cli import run_stallscope

from stallscope.schema import record_schema

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return run_stallscope(*args, cwd=PIPELINES.parent.parent, timeout=timeout, columns=160)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_bench_json_is_valid_and_complete(tmp_path, start_method):
    out = tmp_path / "bench.json"
    plot = tmp_path / "scaling.png"
    proc = run_cli(
        "bench",
        f"{PIPELINES}/bench_sleepy.py:sleepy_dict",
        "--num-workers",
        "0,2",
        "--repeats",
        "2",
        "--window",
        "0.5",
        "--start-method",
        start_method,
        "--json",
        str(out),
        "--plot",
        str(plot),
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    jsonschema.validate(record, record_schema())
    assert record["command"] == "bench"
    assert record["host"]["cores"] >= 1
    labels = [r["label"] for r in record["results"]]
    assert len(labels) == 2
    zero, two = record["results"]
    assert zero["config"]["num_workers"] == 0 and two["config"]["num_workers"] == 2
    assert two["config"]["multiprocessing_context"] == start_method
    # 4 ms sleep per item: two workers are faster than one process (by how much is the
    # business of benchmarks/measurement_accuracy.py, not of a test on a shared machine).
    assert two["speedup"] > 1.1
    assert zero["efficiency"] == pytest.approx(1.0)
    assert two["resources"]["n_workers"] >= 2
    # 4 ms of sleep per item: never less (sleep does not return early), and far from the 16 ms
    # per batch a per-batch/per-sample mix-up would report.
    assert 3.96 <= record["scaling"]["single_process_ms_per_sample"] < 8.0
    assert record["dataset"]["length"] == 512
    assert "samples/s" in proc.stdout
    assert plot.exists() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_takes_dataloader_baseline(tmp_path):
    out = tmp_path / "b.json"
    proc = run_cli(
        "bench",
        f"{PIPELINES}/bench_sleepy.py:sleepy_loader",
        "--num-workers",
        "2",
        "--repeats",
        "1",
        "--window",
        "0.3",
        "--json",
        str(out),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(out.read_text())["results"][0]["config"]
    # batch size and prefetch factor come from the user's DataLoader.
    assert cfg["batch_size"] == 8 and cfg["prefetch_factor"] == 4


def test_module_target_and_python_m(tmp_path):
    out = tmp_path / "b.json"
    proc = run_cli(
        "bench",
        "stallscope.demo:pipeline",
        "--num-workers",
        "0",
        "--repeats",
        "1",
        "--window",
        "0.3",
        "--batch-size",
        "4",
        "--json",
        str(out),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["results"][0]["config"]["batch_size"] == 4


def test_module_beside_the_console_script_in_spawned_workers(tmp_path):
    """``stallscope bench train:make_loader`` run beside ``train.py``: the console script, unlike
    ``python -m``, does not put the working folder on sys.path; the target is found there, and
    spawned workers import it the same way."""
    script = Path(sys.executable).with_name("stallscope")
    if not script.is_file():
        pytest.skip(f"no console script beside {sys.executable}")
    (tmp_path / "ss_e2e_train.py").write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n\n"
        "def make_loader(num_workers=0):\n"
        "    data = TensorDataset(torch.arange(256.0).reshape(64, 4))\n"
        "    return DataLoader(data, batch_size=8, num_workers=num_workers)\n"
    )
    out = tmp_path / "b.json"
    argv = [str(script), "bench", "ss_e2e_train:make_loader", "--num-workers", "0,1"]
    argv += ["--repeats", "1", "--window", "0.3", "--start-method", "spawn", "--json", str(out)]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())["results"]
    assert [r["config"]["num_workers"] for r in results if r.get("error") is None] == [0, 1]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("missing_file.py:fn", "does not exist"),
        ("no_such_package_xyz.mod:fn", "cannot be imported"),
        ("{p}/bench_errors.py:nope", "has no attribute 'nope'"),
        ("{p}/bench_errors.py", "must name a callable"),
        ("{p}/bench_errors.py:raises_on_call", "RuntimeError: cannot open the annotation file"),
        ("{p}/bench_errors.py:needs_args", "must take no arguments"),
        ("{p}/bench_errors.py:not_a_dataset", "returned a int"),
        ("{p}/bench_errors.py:empty", "dataset is empty"),
        ("{p}/bench_errors.py:tiny", "batch size 32 is larger than the dataset (10 items)"),
        ("{p}/bench_errors.py:raises_first", "dataset[0] raised ValueError: corrupt record 0"),
        ("{p}/bench_errors.py:ragged", "collate function cannot batch these items"),
        ("{p}/bench_errors.py:raises_later", "the dataset raised ValueError: corrupt record 200"),
        ("{p}/bench_errors.py:dies_in_worker", "a DataLoader worker died"),
    ],
)
def test_errors_are_one_sentence_and_exit_2(target, expected):
    proc = run_cli(
        "bench",
        target.format(p=PIPELINES),
        "--num-workers",
        "2",
        "--repeats",
        "1",
        "--window",
        "0.3",
        "--timeout",
        "20",
        timeout=120,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert expected in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 3


def test_debug_shows_traceback():
    proc = run_cli("bench", f"{PIPELINES}/bench_errors.py:raises_on_call", "--debug")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr


def test_bad_flags_exit_2():
    proc = run_cli("bench", f"{PIPELINES}/bench_sleepy.py:sleepy", "--num-workers", "two")
    assert proc.returncode == 2
    assert "comma-separated integers" in proc.stderr
    proc = run_cli("bench", f"{PIPELINES}/bench_sleepy.py:sleepy", "--num-workers", "0,-1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--num-workers takes worker counts of 0 or more" in proc.stderr
    proc = run_cli("frobnicate")
    assert proc.returncode == 2
