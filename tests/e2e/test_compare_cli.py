"""``stallscope compare`` through the real CLI: a +20% per-sample cost trips the gate, A/A
passes it."""

from __future__ import annotations

import json

import jsonschema
from test_bench_cli import PIPELINES, run_cli

from stallscope.schema import record_schema

A = f"{PIPELINES}/compare_pipelines.py:base"


def test_a_twice_as_dear_sample_fails_the_gate(tmp_path):
    # Slower beyond the noise of a loaded machine: whether a +20% change trips the gate is the
    # calibration benchmark's to measure (benchmarks/compare_calibration.py).
    out, html = tmp_path / "compare.json", tmp_path / "compare.html"
    proc = run_cli(
        "compare",
        A,
        f"{PIPELINES}/compare_pipelines.py:twice",
        "--window",
        "0.3",
        "--budget",
        "12",
        "--fail-if-slower",
        "10",
        "--json",
        str(out),
        "--html",
        str(html),
    )
    assert proc.returncode == 1, proc.stderr
    record = json.loads(out.read_text())
    jsonschema.validate(record, record_schema())
    assert record["command"] == "compare" and record["verdict"] == "slower"
    assert record["a"]["target"] == A and record["b"]["target"].endswith(":twice")
    ratio = record["ratio"]
    assert ratio["high"] < 0.9 and ratio["rounds"] >= 3 and record["gate"]["failed"] is True
    assert {"ABBA", "BAAB"} <= {r["order"] for r in record["rounds"]}
    # the stage tables point at __getitem__, where the extra sleep is
    top = record["stages_compared"]["rows"][0]
    assert top["name"].startswith("other") and top["delta_ms_per_sample"] > 0
    assert "Verdict: B is slower." in proc.stdout and "CI gate failed" in proc.stdout
    page = html.read_text()
    assert "Stages of A and B" in page and "B is slower" in page


def test_a_to_a_passes_the_gate(tmp_path):
    out = tmp_path / "aa.json"
    proc = run_cli(
        "compare",
        A,
        f"{PIPELINES}/compare_pipelines.py:base_again",
        "--window",
        "0.2",
        "--budget",
        "8",
        "--fail-if-slower",
        "10",
        "--no-stages",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    jsonschema.validate(record, record_schema())
    assert record["gate"]["failed"] is False and "stages_compared" not in record


def test_bad_usage_is_one_sentence_and_exit_2():
    proc = run_cli("compare", A, A, "--precision", "0")
    assert proc.returncode == 2
    assert "--precision" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("compare", A, f"{PIPELINES}/compare_pipelines.py:nothing_here")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
