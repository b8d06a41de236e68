"""The committed results are held to the script that regenerates them (``benchmarks/
regenerate.py``), and the README and docs/ to the committed results."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def regenerate():
    path = ROOT / "benchmarks" / "regenerate.py"
    spec = importlib.util.spec_from_file_location("regenerate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_committed_result_has_the_command_that_makes_it():
    made = regenerate().outputs()
    committed = {p.name for p in RESULTS.iterdir() if p.is_file()}
    assert committed <= made, f"not made by benchmarks/regenerate.py: {committed - made}"


def test_every_entry_runs_a_script_that_exists_and_writes_under_results():
    for entry in regenerate().ENTRIES:
        assert (ROOT / entry.argv[0]).is_file(), entry
        for flag in ("--json", "--out"):
            if flag in entry.argv:
                path = entry.argv[entry.argv.index(flag) + 1]
                assert path.startswith("benchmarks/results/"), entry
                assert Path(path).name in entry.outputs, entry


def test_the_docs_link_only_results_that_are_committed():
    missing = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for name in re.findall(r"benchmarks/results/([\w.-]+\.(?:json|txt))", doc.read_text()):
            if not (RESULTS / name).is_file():
                missing.add(f"{doc.name}: {name}")
    assert not missing, missing


def _provenance_blocks(name: str, data: dict) -> list[dict]:
    if name == "demo_doctor.json":  # the record is the CLI's own; its provenance sits beside it
        return [json.loads((RESULTS / "demo_doctor.provenance.json").read_text())]
    if name == "code_changes.json":  # one run per pipeline, each with its own
        return [p.get("provenance") or {} for p in data["pipelines"].values()]
    return [data.get("provenance") or {}]


def test_every_committed_result_names_its_commit_host_and_load():
    for path in sorted(RESULTS.glob("*.json")):
        if path.name == "demo_doctor.provenance.json":
            continue
        blocks = _provenance_blocks(path.name, json.loads(path.read_text()))
        complete = [
            b.get("commit")
            and b.get("host", {}).get("cores")
            and {"start", "end"} <= set(b.get("load_average") or {})
            for b in blocks
        ]
        assert blocks and all(complete), f"{path.name} lacks commit, host or load"
