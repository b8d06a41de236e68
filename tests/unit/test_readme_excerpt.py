"""The README's excerpt of ``stallscope doctor`` on the demo is its committed record's, regenerated
by ``benchmarks/demo_doctor.py`` (issue 25): it fails when either drifts from the other."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from stallscope.render.console import ConsoleRenderer

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def _script():
    spec = importlib.util.spec_from_file_location(
        "demo_doctor", ROOT / "benchmarks" / "demo_doctor.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _committed() -> tuple[str, dict, dict]:
    console = (RESULTS / "demo_doctor.console.txt").read_text(encoding="utf-8")
    record = json.loads((RESULTS / "demo_doctor.json").read_text())
    provenance = json.loads((RESULTS / "demo_doctor.provenance.json").read_text())
    return console, record, provenance


def test_the_readme_block_is_what_the_committed_run_makes():
    script = _script()
    console, record, provenance = _committed()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = readme.index(script.START), readme.index(script.END) + len(script.END)
    assert readme[start:end] == script.readme_block(console, record, provenance)


def test_the_committed_console_says_the_verdict_todays_renderer_prints_for_its_record():
    script = _script()
    console, record, _ = _committed()
    again = ConsoleRenderer(width=script.COLUMNS).render(record)
    assert script.verdict_lines(console) == script.verdict_lines(again)
    # The JSON's derived block is today's verdict on the same record.
    from stallscope.analysis.run_verdict import decide

    assert record["analysis"] == json.loads(json.dumps(decide(record).to_dict()))


def test_the_provenance_names_a_commit_a_host_and_the_load_at_both_ends():
    _, record, provenance = _committed()
    assert provenance["commit"] and not provenance["commit"].endswith("+dirty")
    assert provenance["host"]["cores"] == record["host"]["cores"]
    assert set(provenance["load_average"]) == {"start", "end"}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    load = provenance["load_average"]
    assert f"load average {load['start']:.2f} at the start, {load['end']:.2f} at the end" in readme


def test_a_busy_machine_is_never_called_quiet():
    # Other jobs are what the load before the run shows; the load at the end counts the doctor's
    # own workers, so it decides nothing.
    words = _script()._load_words(
        {"load_average": {"start": 2.5, "end": 3.9}, "host": {"cores": 2}}
    )
    assert "a busy 2-core machine" in words and "quiet" not in words
    quiet = _script()._load_words(
        {"load_average": {"start": 0.1, "end": 3.9}, "host": {"cores": 2}}
    )
    assert "a quiet 2-core machine" in quiet and "own workers included" in quiet
