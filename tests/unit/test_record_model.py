"""The typed items below a record's top level (record/model.py): every fixture's items read and
write back exactly, older records load with defaults, and a record missing a nested key renders."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from stallscope.analysis.run_verdict import decide
from stallscope.record import RunRecord
from stallscope.record.model import (
    BatchMs,
    BenchResult,
    Best,
    CodeChange,
    ConfigRate,
    Finding,
    Hotspot,
    Search,
    Spread,
    Stage,
    Trial,
    Window,
    best_of,
    results_of,
)
from stallscope.record.sections import (
    BenchSection,
    CheckSection,
    CodeChangesSection,
    LongRunSection,
    StagesSection,
    TuneSection,
)
from stallscope.render import renderer_for

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
RECORDS = sorted(
    [*FIXTURES.glob("record_*.json"), *(FIXTURES / "legacy").glob("record_*.json")]
) + [ROOT / "benchmarks" / "results" / "demo_doctor.json"]
LISTS = {
    "results": BenchResult,
    "trials": Trial,
    "findings": Finding,
    "windows": Window,
    "stages": Stage,
    "hotspots": Hotspot,
    "code_changes": CodeChange,
}
OBJECTS = {"best": Best, "baseline": ConfigRate, "search": Search}


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _items(data: dict) -> list[tuple[str, type, dict]]:
    out = []
    for key, kind in LISTS.items():
        out += [(key, kind, item) for item in data.get(key) or []]
    for key, kind in OBJECTS.items():
        if isinstance(data.get(key), dict):
            out.append((key, kind, data[key]))
    return out


def test_the_fixtures_hold_every_item_kind():
    kinds = {key for path in RECORDS for key, _, _ in _items(json.loads(path.read_text()))}
    assert kinds == set(LISTS) | set(OBJECTS)


@pytest.mark.parametrize("path", RECORDS, ids=_name)
def test_every_nested_item_of_a_fixture_round_trips(path):
    data = json.loads(path.read_text())
    items = _items(data)
    assert items or path.stem == "record_compare"
    for key, kind, item in items:
        typed = kind.from_dict(item)
        assert typed.to_dict() == item, key
        assert typed.extra == {}, f"{key}: keys this version does not type: {sorted(typed.extra)}"


@pytest.mark.parametrize("path", RECORDS, ids=_name)
def test_the_section_accessors_read_the_items_typed(path):
    data = json.loads(path.read_text())
    bench, tune = BenchSection.from_dict(data), TuneSection.from_dict(data)
    assert [r.to_dict() for r in bench.typed_results()] == (data.get("results") or [])
    assert [t.to_dict() for t in tune.typed_trials()] == (data.get("trials") or [])
    best = tune.typed_best()
    assert (best.to_dict() if best else None) == data.get("best")
    base = tune.typed_baseline()
    assert (base.to_dict() if base else None) == data.get("baseline")
    assert [f.to_dict() for f in CheckSection.from_dict(data).typed_findings()] == (
        data.get("findings") or []
    )
    assert [w.to_dict() for w in LongRunSection.from_dict(data).typed_windows()] == (
        data.get("windows") or []
    )
    stages = StagesSection.from_dict(data)
    assert [s.to_dict() for s in stages.typed_stages()] == (data.get("stages") or [])
    assert [h.to_dict() for h in stages.typed_hotspots()] == (data.get("hotspots") or [])
    changes = CodeChangesSection.from_dict(data).typed_code_changes()
    assert [c.to_dict() for c in changes] == (data.get("code_changes") or [])


def test_a_legacy_pick_takes_the_defaults_of_what_0_3_did_not_record():
    data = json.loads((FIXTURES / "legacy" / "record_tune.json").read_text())
    assert "head_to_head" not in data["best"] and "rounds" not in data["best"]
    best = best_of(data)
    assert best is not None
    assert best.head_to_head == () and best.skipped == () and best.rounds is None
    assert best.tie is False and best.keep_baseline is False and best.label is None
    assert best.raced("baseline") is None
    # Defaults are for reading: what is written back is what the record held.
    assert best.to_dict() == data["best"]


def test_a_trials_batch_times_hold_two_percentiles_and_write_back_two():
    trial = Trial.from_dict(
        {"config": {}, "samples_per_s": 10.0, "batch_ms": {"p50": 1.0, "p95": 2.0}}
    )
    assert trial.batch_ms == BatchMs(p50=1.0, p95=2.0)
    assert trial.batch_ms is not None and trial.batch_ms.p99 is None
    assert trial.to_dict()["batch_ms"] == {"p50": 1.0, "p95": 2.0}


def test_unknown_keys_and_values_of_another_type_are_kept():
    raw = {
        "config": {"num_workers": 2},
        "samples_per_s": {"median": 5.0, "min": 4.0, "max": 6.0, "iqr": 1.0},
        "startup_s": "slow",  # another type: the field takes its default, the value is kept
        "a_future_key": [1, 2],
    }
    res = BenchResult.from_dict(raw)
    assert res.startup_s is None and res.extra == {"startup_s": "slow", "a_future_key": [1, 2]}
    assert res.samples_per_s is not None and res.samples_per_s.extra == {"iqr": 1.0}
    assert res.rate == 5.0 and res.measured
    assert res.to_dict() == raw


def test_a_rate_recorded_as_one_number_reads_as_the_median_and_writes_back_a_number():
    res = BenchResult.from_dict({"config": {}, "samples_per_s": 120})
    assert res.samples_per_s == Spread(median=120)
    assert res.rate == 120 and res.to_dict() == {"config": {}, "samples_per_s": 120}


def test_a_failed_result_has_no_rate():
    res = BenchResult.from_dict({"config": {"num_workers": 4}, "label": "w=4", "error": "died."})
    assert not res.measured and res.rate is None
    assert res.to_dict() == {"config": {"num_workers": 4}, "label": "w=4", "error": "died."}


def test_an_item_made_in_code_writes_every_key():
    written = Finding(code="slow-getitem", severity="warning", message="m").to_dict()
    assert written == {
        "code": "slow-getitem",
        "severity": "warning",
        "message": "m",
        "evidence": {},
        "fix": "",
    }


def test_a_list_with_entries_that_are_not_objects_keeps_the_objects():
    assert results_of({"results": [None, {"config": {}}, 3]}) == [BenchResult(config={})]
    assert results_of({"results": "nonsense"}) == []
    best = Best.from_dict({"head_to_head": [{"label": "w=2", "rounds": 3}, "x"]})
    # One entry of another type: the list is kept as it was, and reads as empty.
    assert best.head_to_head == () and best.to_dict()["head_to_head"] == [
        {"label": "w=2", "rounds": 3},
        "x",
    ]


def _cut(data: dict) -> dict:
    """The record without the nested keys an older or foreign writer may leave out."""
    data = copy.deepcopy(data)
    for res in data.get("results") or []:
        for key in ("batch_ms", "startup_s", "repeats", "efficiency", "samples_measured"):
            res.pop(key, None)
    for trial in data.get("trials") or []:
        trial.pop("batch_ms", None)
        trial.pop("startup_s", None)
    if isinstance(data.get("best"), dict):
        for key in ("head_to_head", "rounds", "tie", "margin_interval", "gain_interval", "label"):
            data["best"].pop(key, None)
    for finding in data.get("findings") or []:
        finding.pop("evidence", None)
    for window in data.get("windows") or []:
        window.pop("workers", None)
    return data


@pytest.mark.parametrize("fmt", ["console", "md", "json"])
@pytest.mark.parametrize(
    "path",
    [p for p in RECORDS if p.stem in {"record_bench", "record_tune", "demo_doctor"}],
    ids=_name,
)
def test_a_record_missing_nested_keys_renders(path, fmt):
    data = _cut(json.loads(path.read_text()))
    record = RunRecord.from_dict(data)
    text = renderer_for(fmt).render(record)
    assert isinstance(text, str) and text
    verdict = decide(record)
    if verdict.label is not None and fmt != "json":
        assert verdict.label in text


def test_the_model_passes_mypy_strict_on_its_own(tmp_path):
    api = pytest.importorskip("mypy.api")
    model = ROOT / "src" / "stallscope" / "record" / "model.py"
    out, err, status = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path), str(model)]
    )
    assert status == 0, out + err


def test_a_list_edited_in_place_is_read_again():
    record = {"results": [{"config": {}, "samples_per_s": {"median": 1.0}}]}
    assert results_of(record)[0].rate == 1.0
    assert results_of(record)[0] is results_of(record)[0]  # read once while it is unchanged
    record["results"][0]["samples_per_s"]["median"] = 2.0
    assert results_of(record)[0].rate == 2.0
    record["results"].append({"config": {}, "error": "died."})
    assert [r.measured for r in results_of(record)] == [True, False]
