"""Markdown and HTML reports: every renderer over every fixture record, number provenance,
self-containment."""

from __future__ import annotations

import base64
import json
import re
from functools import cache
from pathlib import Path

import pytest
from report_numbers import markdown_text, tokens, unexplained_numbers, visible_html_text

from stallscope import analysis as an
from stallscope.analysis import costs
from stallscope.analysis.run_verdict import decide
from stallscope.record import RunRecord
from stallscope.render import renderer_for, write_report
from stallscope.render.html import HTMLRenderer
from stallscope.render.markdown import MarkdownRenderer, escape
from stallscope.render.plots import PLOTS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NAMES = ["bench", "tune", "check", "stages", "profile", "compare", "doctor"]

# Which headings a record's sections must produce (and which must be absent otherwise).
SECTION_KEYS = {
    "Benchmark": "results",
    "Tuning": "best",
    "Stage breakdown": "stages",
    "Training loop": "stall_fraction",
    "Check findings": "findings",
}


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"record_{name}.json").read_text())


@cache
def html_with_plots(name: str) -> str:
    return HTMLRenderer().render(RunRecord.from_dict(load(name)))


def test_every_fixture_is_a_loadable_record():
    assert sorted(p.stem for p in FIXTURES.glob("record_*.json")) == sorted(
        f"record_{n}" for n in NAMES
    )
    for name in NAMES:
        record = RunRecord.load(FIXTURES / f"record_{name}.json")
        assert record.command == name
        assert record.to_dict() == load(name)


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
@pytest.mark.parametrize("name", NAMES)
def test_every_renderer_renders_every_record(name, fmt):
    record = RunRecord.from_dict(load(name))
    renderer = renderer_for(fmt)
    if fmt == "html":
        renderer.plots = False  # plots are covered below; keep this test fast
    text = renderer.render(record)
    assert isinstance(text, str) and text.endswith("\n")
    verdict = decide(load(name))
    if fmt == "json":
        data = json.loads(text)
        # The record as it was, and the verdict analysis derives from it (SPEC §5 "analysis").
        assert data.pop("analysis") == json.loads(json.dumps(verdict.to_dict()))
        assert data == load(name)
        return
    assert f"stallscope {name} report" in text
    # The verdict opens the report: the one config to use, or the executive label.
    first = text.index("Verdict")
    assert all(first < text.index(h) for h in SECTION_KEYS if h in text)
    if verdict.label is not None:
        assert escape(verdict.label) in text or verdict.label in text
    else:
        assert "Verdict:" in text
    for heading, key in SECTION_KEYS.items():
        present = key in load(name)
        assert (heading in text) == present, (
            f"{heading!r} {'missing' if present else 'unexpected'} in {name}"
        )
    assert ("Troubleshooting" in text) == bool(load(name).get("findings"))
    assert ("Estimated epoch time" in text) == (an.epoch_estimate(load(name)) is not None)


def test_a_bench_record_renders_a_bench_report_and_a_doctor_record_everything():
    bench = MarkdownRenderer().render(load("bench"))
    headings = re.findall(r"^## (.+)$", bench, flags=re.M)
    assert headings == [
        "Verdict",
        "Benchmark",
        "This machine's ceiling",
        "Estimated epoch time",
        "Memory budget of in-flight batches",
        "CPU use",
        "Checklist",
        "Recommendations",
    ]
    doctor = re.findall(r"^## (.+)$", MarkdownRenderer().render(load("doctor")), flags=re.M)
    assert doctor == [
        "Verdict",
        "Benchmark",
        "Tuning",
        "This machine's ceiling",
        "Stage breakdown",
        "Code changes, applied and measured",
        "Training loop",
        "Estimated epoch time",
        "Memory budget of in-flight batches",
        "CPU use",
        "Checklist",
        "Check findings",
        "Recommendations",
    ] + (["Troubleshooting"] if load("doctor")["findings"] else [])


@pytest.mark.parametrize("name", NAMES)
def test_every_number_in_the_markdown_comes_from_the_record(name):
    record = load(name)
    text = markdown_text(MarkdownRenderer().render(record, images={k: f"{k}.png" for k in PLOTS}))
    assert len(tokens(text)) > 20
    assert unexplained_numbers(text, record) == []


@pytest.mark.parametrize("name", NAMES)
def test_every_number_in_the_html_comes_from_the_record(name):
    record = load(name)
    text = visible_html_text(html_with_plots(name))
    assert len(tokens(text)) > 20
    assert unexplained_numbers(text, record) == []


def test_the_number_check_catches_a_wrong_derivation(monkeypatch):
    """A 3% error in one derived figure (epoch time) is caught: the check is not vacuous."""
    record = load("doctor")
    original = costs._epoch_row

    def off_by_three_percent(*args, **kwargs):
        row = original(*args, **kwargs)
        row.seconds *= 1.03
        return row

    monkeypatch.setattr(costs, "_epoch_row", off_by_three_percent)
    bad = unexplained_numbers(markdown_text(MarkdownRenderer().render(record)), record)
    # The epoch time is in ms, s or min depending on what the fixture's run measured.
    assert any(b.endswith(("ms", "s", "min")) for b in bad), bad
    text = "took 48,213.7 ms at 98,765 samples/s, 13.77% and 917.38×"
    assert unexplained_numbers(text, record) == ["48,213.7 ms", "98,765", "13.77 %", "917.38 ×"]


@pytest.mark.parametrize("name", NAMES)
def test_html_is_self_contained(name):
    page = html_with_plots(name)
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"https?:", page, flags=re.I)
    assert "<script" not in page.lower() and "<link" not in page.lower() and "@import" not in page
    assert "url(" not in page
    for src in re.findall(r'src="([^"]*)"', page):
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    for href in re.findall(r'href="([^"]*)"', page):
        assert href.startswith("#") and f'id="{href[1:]}"' in page
    expected_plots = [n for n, build in PLOTS.items() if build(load(name)) is not None]
    assert len(re.findall(r"<img ", page)) == len(expected_plots)


def test_record_text_is_escaped():
    record = load("check")
    record["target"] = "<script>alert('x')</script>.py:build"
    record["findings"][0]["message"] = "a | b <b>bold</b> & *star* __init__"
    record["findings"][0]["fix"] = "use `seed_worker` <now>"
    page = HTMLRenderer(plots=False).render(record)
    assert "<script>" not in page and "<b>bold" not in page
    assert "&lt;script&gt;" in page and "&lt;b&gt;bold&lt;/b&gt; &amp; *star*" in page
    assert "<code>seed_worker</code> &lt;now&gt;" in page
    md = MarkdownRenderer().render(record)
    assert "a \\| b \\<b>bold\\</b> & \\*star\\* \\_\\_init\\_\\_" in md
    row = next(line for line in md.splitlines() if line.startswith("| ❌ fail | `unpicklable`"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 4  # the message's pipe does not add a column


def test_markdown_escape_keeps_plain_text_readable():
    assert escape("persistent_workers=True on x86_64") == "persistent_workers=True on x86_64"
    assert escape("- not a list") == "\\- not a list"
    assert escape("[link](http) and [x]") == "[link\\](http) and [x]"


def test_markdown_write_links_the_plots_it_writes(tmp_path):
    path = tmp_path / "out" / "report.md"
    path.parent.mkdir()
    written = MarkdownRenderer().write(load("doctor"), path, plots_dir=tmp_path / "plots")
    # every plot but the one over time windows (this doctor run fitted in one window)
    expected = sorted(f"{n}.png" for n in PLOTS if n != "over_time")
    assert written[0] == path and sorted(p.name for p in written[1:]) == expected
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", path.read_text())
    assert links == [
        "../plots/scaling.png",
        "../plots/latency.png",
        "../plots/stages.png",
        "../plots/timeline.png",
    ]
    assert all((path.parent / link).is_file() for link in links)


def test_write_report_dispatches_by_extension(tmp_path):
    record = RunRecord.from_dict(load("stages"))
    write_report(record, tmp_path / "r.md")
    write_report(record, tmp_path / "r.html")
    assert (tmp_path / "r_plots" / "stages.png").is_file()
    assert "![Per-sample time by stage](r_plots/stages.png)" in (tmp_path / "r.md").read_text()
    assert (tmp_path / "r.html").read_text().count("data:image/png;base64,") == 1


def test_sentences_follow_the_measurements():
    """Change the measurements and the summary changes with them (nothing is canned)."""
    record = load("bench")
    before = MarkdownRenderer().render(record)
    for res in record["results"]:
        if res["samples_per_s"]:
            res["samples_per_s"]["median"] *= 2
    after = MarkdownRenderer().render(record)
    summary = lambda text: text.split("## Benchmark")[0]  # noqa: E731
    assert summary(before) != summary(after)
    best = load("bench")["results"][record["scaling"]["best_index"]]["samples_per_s"]["median"]
    assert f"{2 * best:,.0f} samples/s" in after and f"{best:,.0f} samples/s" in before


def test_a_partial_record_says_so():
    record = load("bench")
    record["partial"] = True
    assert "Partial run:" in MarkdownRenderer().render(record)
    assert "Partial run:" not in MarkdownRenderer().render(load("bench"))


def _degenerate_records() -> dict[str, dict]:
    base = {
        "schema": 1,
        "tool_version": "0.1.0",
        "target": "t.py:f",
        "started_at": 0,
        "duration_s": None,
        "partial": True,
    }
    failed = load("bench")
    for res in failed["results"]:
        res.update(samples_per_s=None, error="RuntimeError: worker died")
    failed["scaling"]["best_index"] = None
    return {
        "no host, no sections": {**base, "command": "bench", "host": {}},
        "every config failed": failed,
        "empty sweep": {
            **base,
            "command": "bench",
            "host": {"cores": 2},
            "results": [],
            "scaling": {},
        },
        "clean check": {
            **base,
            "command": "check",
            "host": {"cores": 2},
            "findings": [],
            "coverage": {},
        },
        "profile without steps": {
            **base,
            "command": "profile",
            "host": {},
            "stall_fraction": None,
            "verdict": None,
            "steps": 0,
            "step_timeline": {"data_ms": [], "compute_ms": []},
        },
        "augmentation only": {
            **base,
            "command": "stages",
            "host": {},
            "stages": [],
            "augmentation_overhead": {"ms_per_sample": 1.5, "percent": 12.0, "transforms": []},
        },
    }


@pytest.mark.parametrize("case", sorted(_degenerate_records()))
def test_degenerate_records_render(case):
    record = _degenerate_records()[case]
    md = MarkdownRenderer().render(record)
    page = HTMLRenderer().render(record)
    assert md.startswith("# stallscope ") and "<!DOCTYPE html>" in page
    assert unexplained_numbers(markdown_text(md), record) == []
    assert unexplained_numbers(visible_html_text(page), record) == []
    assert "None" not in md and "nan" not in md.lower()


# -- the renderer protocol and the console path ------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "md", "html", "console", "plots"])
def test_every_renderer_writes_what_it_renders_and_returns_the_files(fmt, tmp_path):
    record = RunRecord.from_dict(load("doctor"))
    renderer = renderer_for(fmt)
    if fmt == "html":
        renderer.plots = False
    rendered = renderer.render(record)
    path = tmp_path / ("plots" if fmt == "plots" else f"report.{fmt}")
    written = renderer.write(record, path)
    assert written and all(p.is_file() for p in written)
    if fmt == "plots":
        expected = [
            n for n in PLOTS if n != "over_time"
        ]  # the doctor run fitted in one time window
        assert sorted(rendered) == sorted(expected) and all(
            png.startswith(b"\x89PNG") for png in rendered.values()
        )
        assert sorted(p.stem for p in written) == sorted(rendered)
    else:
        assert written[0] == path and isinstance(rendered, str) and rendered
        if fmt != "md":  # the Markdown written links its plots; rendered bare it has no figures
            assert path.read_text(encoding="utf-8") == rendered


def test_json_written_loads_back_as_the_same_record(tmp_path):
    record = RunRecord.from_dict(load("tune"))
    [path] = write_report(record, tmp_path / "run.json")
    assert RunRecord.load(path).to_dict() == record.to_dict()


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "cannot read"),
        ("{not json", "is not JSON"),
        ('["a list"]', "is not a stallscope run record"),
        ('{"command": "bench", "schema": 99}', "unsupported record schema"),
    ],
)
def test_loading_a_bad_record_is_one_usage_error(tmp_path, content, message):
    from stallscope.errors import UsageError

    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=message):
        RunRecord.load(path)


def _console(name: str, view: str = "summary", record: dict | None = None) -> str:
    from stallscope.render.console import ConsoleRenderer

    return ConsoleRenderer(view).render(load(name) if record is None else record)


def test_the_console_summary_is_the_commands_own_section():
    bench, tune = _console("bench"), _console("tune")
    assert "DataLoader throughput" in bench and "Configs measured" not in bench
    assert "Configs measured" in tune and "DataLoader throughput" not in tune
    # Each opens as its reports do: the one verdict (the config, its code or the change in words,
    # the advice), then the evidence.
    for text, evidence in ((tune, "Configs measured"), (bench, "DataLoader throughput")):
        assert text.index("Verdict") < text.index("Evidence") < text.index(evidence)


def test_a_doctor_console_summary_opens_with_the_verdict_then_every_section_it_measured():
    record = load("doctor")
    record.pop("loader_code", None)  # as when the snippet did not run
    text = _console("doctor", record=record)
    order = [
        "Verdict",
        "Evidence",
        "DataLoader throughput",
        "Configs measured",
        "Per step (steady state)",
    ]
    positions = [text.index(heading) for heading in order]
    assert positions == sorted(positions)
    verdict = text[: positions[1]]
    assert decide(record).label in verdict
    # NOTE [verified snippets]: a record without code that ran says the change in words, not code.
    assert "DataLoader(" not in verdict and "no code is shown" in verdict


def test_what_to_set_prints_the_code_that_ran():
    from stallscope.render.console import ConsoleRenderer

    record = load("doctor")
    config = (
        record["best"]["config"]
        if not record["best"].get("keep_baseline")
        else record["baseline"]["config"]
    )
    code = "loader = DataLoader(dataset, batch_size=32, num_workers=4)\n"
    record["loader_code"] = {"config": config, "python": code, "verified": True}
    assert code.strip() in ConsoleRenderer().render(record)


def test_the_console_report_view_is_the_report_document():
    text = _console("bench", view="report")
    assert "Verdict" in text and f"Use: {decide(load('bench')).label} at" in text
