"""Every loader kind through the real CLI (NOTE [loader kinds]): measured as it is, tuned through what it
exposes, and every printed snippet executed as printed (NOTE [verified snippets])."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PIPELINES = Path(__file__).parent.parent / "pipelines"
KINDS = "real_loader_kinds.py"


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stallscope", *args], cwd=PIPELINES, capture_output=True, text=True, timeout=timeout,
    )


def _two_batches(code: str) -> str:
    """Run printed code from the target's folder, as a user would, and describe two batches."""
    script = code + (
        "\nfrom stallscope.pipeline.structure import describe_structure\n"
        "it = iter(loader)\nfirst = next(it)\nnext(it)\nprint('STRUCTURE', describe_structure(first))\n"
        "del it\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=PIPELINES, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split("STRUCTURE", 1)[1].strip()


@pytest.mark.parametrize(
    ("factory", "kind"),
    [
        ("nodes_graph", "torchdata-nodes"),
        ("wrapped_loader", "wrapped-dataloader"),
        ("mapping_batches", "dataloader"),
        ("threaded_stream", "factory"),
        ("sharded_text", "dataloader-subclass"),
        ("stateful_text", "dataloader-subclass"),
    ],
)
def test_tune_prints_only_code_that_runs(factory, kind, tmp_path):
    out = tmp_path / "tune.json"
    done = run_cli("tune", f"{KINDS}:{factory}", "--budget", "8", "--emit", "python", "--json", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["loader_kind"]["name"] == kind
    assert record["best"]["samples_per_s"] > 0
    code = record["loader_code"]
    if code["verified"]:
        assert "loader = " in done.stdout
        structure = _two_batches(done.stdout)
        assert structure.split("[")[0] == code["structure"].split("[")[0]
    else:  # no code that was not run: the change in words, and why
        assert "loader = " not in done.stdout and code["reason"]
        assert all(line.startswith("#") for line in done.stdout.strip().splitlines())


def test_a_subclass_with_required_keyword_only_arguments_is_written_with_them():
    done = run_cli("tune", f"{KINDS}:sharded_text", "--budget", "8", "--emit", "python", "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ShardedTextLoader(" in done.stdout and "corpus_size=512" in done.stdout and "rank=0" in done.stdout
    assert "collate_fn" not in done.stdout  # its constructor builds its own
    _two_batches(done.stdout)


def test_an_iterable_of_batches_is_measured_but_not_tuned(tmp_path):
    out = tmp_path / "bench.json"
    done = run_cli("bench", f"{KINDS}:batch_stream", "--repeats", "1", "--window", "0.4", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert [r["config"]["num_workers"] for r in record["results"]] == [0]  # measured as it is
    assert record["results"][0]["samples_per_s"]["median"] > 0
    assert record["dataset"]["kind"]["name"] == "iterable"
    tuned = run_cli("tune", f"{KINDS}:batch_stream", "--budget", "5")
    assert tuned.returncode == 2 and "Traceback" not in tuned.stderr
    said = " ".join(tuned.stderr.split())  # rich wraps long lines
    assert "measured as it is" in said and "num_workers=" in said


@pytest.mark.parametrize("command", ["check", "stages"])
def test_per_sample_probes_say_why_they_cannot_run_on_a_graph(command):
    done = run_cli(command, f"{KINDS}:nodes_graph")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "has no Dataset" in " ".join(done.stderr.split())


def test_doctor_on_a_graph_runs_what_it_can_and_names_the_rest(tmp_path):
    done = run_cli("doctor", f"{KINDS}:nodes_graph", "--budget", "8", "--out", str(tmp_path / "r"), timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    record = json.loads((tmp_path / "r" / "report.json").read_text())
    assert {item["step"] for item in record["not_run"]} >= {"check", "stages"}
    assert not [f for f in record.get("findings", []) if f.get("severity") == "error"]
    assert record["best"]["samples_per_s"] > 0
    assert "not run: check" in " ".join(done.stdout.split())


def test_token_batches_report_tokens_per_second(tmp_path):
    out = tmp_path / "bench.json"
    done = run_cli("bench", f"{KINDS}:mapping_batches", "--num-workers", "0", "--repeats", "1", "--window", "0.4",
                   "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(out.read_text())["results"][0]
    # a UserDict batch of padded token ids with an attention mask: tokens counted, padding not
    assert 0 < row["tokens_per_s"]["median"]
    assert "tokens/s" in done.stdout
