"""The typed record: declared sections, the closed JSON schema, the fixtures real probes made."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from stallscope.record import (
    DERIVED_KEYS,
    HEADER_KEYS,
    SECTIONS,
    RunRecord,
    UndeclaredKeyError,
    declared_keys,
)
from stallscope.record.sections import BenchSection, ProfileSection, Scaling, TuneSection
from stallscope.schema import record_schema

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NAMES = ["bench", "tune", "check", "stages", "profile", "compare", "doctor"]


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"record_{name}.json").read_text())


@pytest.mark.parametrize("name", NAMES)
def test_every_fixture_validates_and_says_which_command_made_it(name):
    record = load(name)
    jsonschema.validate(record, record_schema())
    assert record["argv"][:2] == ["stallscope", name]
    assert f"tests/fixtures/record_{name}.json" in record["argv"]


def test_the_schema_describes_exactly_the_declared_keys():
    properties = record_schema()["properties"]
    assert list(properties)[: len(HEADER_KEYS)] == list(HEADER_KEYS)
    assert set(properties) == set(HEADER_KEYS) | set(declared_keys()) | set(DERIVED_KEYS)
    undescribed = [k for k, v in properties.items() if not v.get("description")]
    assert undescribed == []


def test_the_schema_rejects_an_unknown_key():
    schema = record_schema()
    record = load("bench")
    record["bench_speed"] = 1.0
    with pytest.raises(jsonschema.ValidationError, match="bench_speed"):
        jsonschema.validate(record, schema)
    # A section whose keys are fixed is closed too.
    record = load("bench")
    record["scaling"]["best_rate"] = 1.0
    with pytest.raises(jsonschema.ValidationError, match="best_rate"):
        jsonschema.validate(record, schema)


def test_add_rejects_a_key_no_section_declares():
    record = RunRecord(command="bench", target="t.py:f", host={})
    record.add(results=[], scaling={"cores": 2})
    with pytest.raises(UndeclaredKeyError, match="'bench_speed'"):
        record.add(bench_speed=1.0)
    with pytest.raises(UndeclaredKeyError, match="'target'.*header"):
        record.add(target="elsewhere")
    assert "bench_speed" not in record.sections


def test_from_dict_rejects_an_undeclared_key():
    data = load("profile")
    data["bench_speed"] = 1.0
    with pytest.raises(UndeclaredKeyError, match="'bench_speed'"):
        RunRecord.from_dict(data)


@pytest.mark.parametrize("name", NAMES)
def test_typed_sections_read_every_value_a_probe_wrote(name):
    data = load(name)
    record = RunRecord.from_dict(data)
    assert record.to_dict() == data
    for kind in SECTIONS:
        typed = record.section(kind).to_dict()
        for key in kind.keys():
            if key in data:
                assert typed[key] == data[key], (kind.__name__, key)


def test_an_older_record_reads_with_defaults():
    old = {"schema": 1, "command": "bench", "target": "t.py:f", "host": {"cores": 2}}
    record = RunRecord.from_dict(old)
    assert record.argv == [] and record.duration_s is None and record.tool_version == "?"
    bench = record.section(BenchSection)
    assert bench.results == [] and bench.scaling is None
    tune = record.section(TuneSection)
    assert tune.trials == [] and tune.best is None


def test_a_wrong_typed_or_null_value_takes_the_default():
    profile = ProfileSection.from_dict(
        {"steps": True, "stall_fraction": float("nan"), "epoch_start_s": None, "verdict": 3}
    )
    assert profile.steps is None and profile.stall_fraction is None
    assert profile.epoch_start_s == [] and profile.verdict is None
    scaling = BenchSection.from_dict({"scaling": {"best_index": 1, "cores": "two"}}).scaling
    assert scaling == Scaling(best_index=1)


def test_every_section_key_has_one_meaning():
    """A key two sections declare (compare's and profile's ``verdict``) has the same type."""
    seen: dict[str, object] = {}
    for kind in SECTIONS:
        fields = kind.__dataclass_fields__
        for key in kind.keys():
            hint = fields[key].type
            assert seen.setdefault(key, hint) == hint, key


def test_each_fixture_was_made_by_the_fixture_script_as_it_stands():
    """A fixture whose command line differs from make_fixtures.py's is stale: run the script."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert sorted(script.COMMANDS) == sorted(NAMES)
    for name, args in script.COMMANDS.items():
        argv = load(name)["argv"]
        assert argv[1 : 1 + len(args)] == args, name
