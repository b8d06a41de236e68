"""Records written by stallscope 0.3 (tests/fixtures/legacy/) still load, analyse and render."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from stallscope import analysis as an
from stallscope.analysis.run_verdict import decide
from stallscope.record import SECTIONS, RunRecord
from stallscope.render import renderer_for

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"
NAMES = ["bench", "tune", "check", "stages", "profile", "doctor"]


def load(name: str) -> dict:
    return json.loads((LEGACY / f"record_{name}.json").read_text())


def test_the_legacy_folder_holds_every_old_record():
    assert sorted(p.stem for p in LEGACY.glob("record_*.json")) == sorted(
        f"record_{n}" for n in NAMES
    )


@pytest.mark.parametrize("name", NAMES)
def test_an_old_record_loads_with_defaults(name):
    data = load(name)
    record = RunRecord.load(LEGACY / f"record_{name}.json")
    assert record.command == name and record.argv == []  # 0.3 did not keep the command line
    again = record.to_dict()
    assert {k: again[k] for k in data} == data
    for kind in SECTIONS:
        record.section(kind)  # every typed section reads an old record


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
@pytest.mark.parametrize("name", NAMES)
def test_an_old_record_renders_again(name, fmt):
    record = RunRecord.from_dict(load(name))
    facts = an.report_facts(record)
    assert facts.command == name
    renderer = renderer_for(fmt)
    if fmt == "html":
        renderer.plots = False
    text = html.unescape(renderer.render(record))
    verdict = decide(record)
    if fmt == "json":
        data = json.loads(text)
        assert data["command"] == name
        assert data["analysis"]["label"] == verdict.label  # today's verdict, derived again
        return
    assert f"stallscope {name} report" in text and "Verdict" in text
    # The one config to use is named in the report, with its one rate's measurement.
    if verdict.label is not None:
        assert verdict.label in text and str(verdict.measurement) in text
    else:
        assert "Verdict:" in text  # a check or a profile: the executive label
