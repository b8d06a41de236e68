"""``stallscope report OLD.json`` re-analyses the measurements with today's rules: advice an older
record carries (``recommendations``, ``advice``) is never rendered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stallscope.commands import report as report_command

FIXTURES = Path(__file__).parent.parent / "fixtures"
STALE_TITLE = "Rewrite the loader in Fortran"
STALE_DETAIL = "An older stallscope said so; no rule of today's does."
STALE_ADVICE = "input-bound: stale advice. Next: buy a bigger disk"


def _stale_record(name: str, tmp_path: Path) -> Path:
    record = json.loads((FIXTURES / name).read_text())
    record["recommendations"] = [
        {
            "id": "fortran-rewrite",
            "title": STALE_TITLE,
            "detail": STALE_DETAIL,
            "measured": "nothing",
            "expected_gain": "10x",
        }
    ]
    record["advice"] = STALE_ADVICE
    path = tmp_path / name
    path.write_text(json.dumps(record))
    return path


def _words(text: str) -> str:
    return " ".join(text.replace("**", "").replace("`", "").split())


@pytest.mark.parametrize(
    ("fixture", "today"),
    [
        ("record_tune.json", ["Use the tuned DataLoader settings"]),
        (
            "record_profile.json",
            [
                "The input pipeline limits training: tune the loader",
                "The first batch of each epoch costs a visible share of the run",
                "Next: The input pipeline limits training",
            ],
        ),
    ],
)
def test_report_renders_todays_advice_not_the_records(fixture, today, tmp_path, capsys):
    path = _stale_record(fixture, tmp_path)
    md = tmp_path / "report.md"
    assert report_command.main([str(path), "--md", str(md)]) == 0
    assert report_command.main([str(path)]) == 0
    surfaces = {"md": _words(md.read_text()), "console": _words(capsys.readouterr().out)}
    for name, text in surfaces.items():
        for stale in (STALE_TITLE, STALE_DETAIL, "buy a bigger disk", "Fortran"):
            assert stale not in text, (name, stale)
        for line in today:
            assert line in text, (name, line)
