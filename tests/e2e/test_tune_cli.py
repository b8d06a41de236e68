"""`stallscope tune` end to end: a real subprocess on a tiny sleep-based pipeline."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from stallscope.commands import tune as tune_command
from stallscope.config import LoaderConfig
from stallscope.tuning.emit import PLACEHOLDER

BUDGET = 10.0


def test_tune_cli_json_and_yaml(tmp_path, pipelines_dir):
    out = tmp_path / "tune.json"
    target = f"{pipelines_dir / 'tune_pipelines.py'}:waiting_loader"
    proc = subprocess.run(
        [sys.executable, "-m", "stallscope", "tune", target, "--budget", str(BUDGET), "--json", str(out), "--emit", "yaml"],
        capture_output=True, text=True, timeout=BUDGET + 60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["command"] == "tune" and record["schema"] == 1
    assert {"baseline", "best", "trials", "tuning_seconds", "recommendations"} <= set(record)
    assert record["tuning_seconds"] <= BUDGET + 5
    # The user's loader (1 worker, 4 ms of sleep per item) is the baseline; sleeping parallelises.
    assert record["baseline"]["config"]["num_workers"] == 1
    best = record["best"]
    assert best["config"]["num_workers"] > 2 and best["speedup"] > 1.5
    assert 0.0 <= best["confidence"] <= 1.0
    assert all({"config", "label", "samples_per_s", "phase"} <= set(t) for t in record["trials"])
    assert record["search"]["region"]["name"] == "latency-bound"
    # stdout carries only the YAML (pipe-able); it matches the record's pick.
    assert LoaderConfig.from_yaml(proc.stdout) == LoaderConfig.from_dict(best["config"])
    assert "Pick:" in proc.stderr


def test_tune_cli_emits_python(capsys, pipelines_dir):
    code = tune_command.main([f"{pipelines_dir / 'tune_pipelines.py'}:tensors", "--budget", "3", "--quiet", "--emit", "python"])
    assert code == 0
    emitted = capsys.readouterr().out
    # The dataset is built inside the target: a marked placeholder the user fills in with their variable.
    assert "    <your dataset: torch.utils.data.dataset.TensorDataset instance>,\n" in emitted
    tree = ast.parse(PLACEHOLDER.sub(lambda m: m.group(1), emitted))
    assert any(isinstance(node, ast.Assign) and node.targets[0].id == "loader" for node in tree.body)


def test_tune_cli_usage_errors(pipelines_dir, capsys):
    assert tune_command.main(["nowhere.py:fn"]) == 2
    assert tune_command.main([f"{pipelines_dir / 'tune_pipelines.py'}:waiting", "--budget", "0"]) == 2
    assert tune_command.main([f"{pipelines_dir / 'tune_pipelines.py'}:waiting", "--emit", "toml"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
