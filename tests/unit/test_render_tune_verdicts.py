"""One winner, honest confidence, keep yours: what the tune verdicts look like in every renderer."""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path

import pytest
from report_numbers import markdown_text, unexplained_numbers, visible_html_text

from stallscope.render.console import ConsoleRenderer
from stallscope.render.html import HTMLRenderer
from stallscope.render.markdown import MarkdownRenderer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _record(**best) -> dict:
    record = json.loads((FIXTURES / "record_tune.json").read_text())
    record["best"].update(best)
    record["best"]["label"] = "w=8 bs=64 pf=4 persistent"
    record["baseline"]["label"] = "w=2 bs=64 pf=2"
    return record


def _unconfirmed() -> dict:
    record = _record(
        rounds=1,
        confidence=None,
        confirmed=False,
        skipped=[
            {
                "label": "w=16 bs=64 pf=2",
                "why": "not measured: the time budget ran out in the climb phase",
            }
        ],
        head_to_head=[],
    )
    record["search"]["plan"] = {
        "summary": "plan: 0.303 s per batch in one process; the 19 s left fit about 6 measurements"
    }
    return record


def _keep_yours() -> dict:
    base = copy.deepcopy(_record()["baseline"])
    record = _record(
        samples_per_s=205.4,
        speedup=1.0098,
        rounds=4,
        confidence=0.55,
        confirmed=True,
        keep_baseline=True,
        within_pct=0.97,
        head_to_head=[
            {
                "config": _record()["best"]["config"],
                "label": "w=8 bs=64 pf=4",
                "samples_per_s": 205.4,
                "rounds": 4,
                "role": "tuner",
            },
            {
                "config": base["config"],
                "label": "w=2 bs=64 pf=2",
                "samples_per_s": 203.4,
                "rounds": 4,
                "role": "baseline",
            },
        ],
    )
    record["search"]["persistent_workers"] = {
        "measured_on": "w=2 bs=64 pf=2",
        "gap_without_s": 0.61,
        "gap_with_s": 0.12,
        "saved_s": 0.49,
        "recommended": True,
    }
    return record


def _console(record: dict) -> str:
    """The tune command's whole console summary: the verdict, then the tuner's evidence."""
    return ConsoleRenderer(width=200).render(record)


@pytest.mark.parametrize("render", ["md", "html", "console"])
def test_no_confidence_below_two_rounds_says_not_confirmed_and_what_was_skipped(render):
    record = _unconfirmed()
    text = {
        "md": lambda r: MarkdownRenderer().render(r),
        "html": lambda r: HTMLRenderer(plots=False).render(r),
        "console": _console,
    }[render](record)
    assert "Not confirmed: the budget ran out" in text
    assert (
        "w=16 bs=64 pf=2" in text
        and "not measured: the time budget ran out in the climb phase" in text
    )
    assert "Confidence" not in text and "confidence:" not in text


@pytest.mark.parametrize("render", ["md", "html", "console"])
def test_keep_yours_is_the_verdict_with_the_head_to_head(render):
    record = _keep_yours()
    text = {
        "md": lambda r: MarkdownRenderer().render(r),
        "html": lambda r: html.unescape(HTMLRenderer(plots=False).render(r)),
        "console": _console,
    }[render](record)
    text = " ".join(text.split())  # the console wraps its lines
    assert "within 0.97" in text or "within 1.0%" in text
    assert "no change is recommended" in text
    # The head-to-head roles: the tuner's scan put its fastest in the race, which lost it; the
    # user's loader is the one kept.
    assert "fastest in the tuner's scan" in text and "baseline, kept" in text
    # The measured epoch-boundary gap, as the renderer writes seconds.
    assert ("0.61 s" in text and "0.12 s" in text) or ("610 ms" in text and "120 ms" in text)


def _race_won_by_another_finalist() -> dict:
    """The tuner's scan put w=8 first; another finalist, w=12, won the race."""
    record = _record()
    tuner = copy.deepcopy(record["best"]["config"])
    winner = {**tuner, "num_workers": 12}
    record["best"].update(config=winner, label="w=12 bs=64 pf=4 persistent", samples_per_s=260.0)
    record["best"]["head_to_head"] = [
        {
            "config": tuner,
            "label": "w=8 bs=64 pf=4",
            "samples_per_s": 240.0,
            "rounds": 4,
            "role": "tuner",
        },
        {
            "config": {**winner, "persistent_workers": False},
            "label": "w=12 bs=64 pf=4",
            "samples_per_s": 260.0,
            "rounds": 4,
            "role": "other",
        },
        {
            "config": record["baseline"]["config"],
            "label": "w=2 bs=64 pf=2",
            "samples_per_s": 200.0,
            "rounds": 4,
            "role": "baseline",
        },
    ]
    return record


@pytest.mark.parametrize("render", ["md", "html", "console"])
def test_the_race_table_marks_the_verdicts_row_not_the_tuners_nominee(render):
    record = _race_won_by_another_finalist()
    text = {
        "md": lambda r: MarkdownRenderer().render(r),
        # One table row a line.
        "html": lambda r: html.unescape(
            re.sub(r"<[^>]+>", " ", HTMLRenderer(plots=False).render(r).replace("</tr>", "\n"))
        ),
        "console": _console,
    }[render](record)
    rows = {
        line.split("w=")[1].split()[0]: line
        for line in text.splitlines()
        if ("w=12 bs=64 pf=4" in line or "w=8 bs=64 pf=4" in line)
        and ("pick" in line or "scan" in line)
    }
    assert "pick" in rows["12"] and "scan" not in rows["12"]
    assert "fastest in the tuner's scan" in rows["8"] and "pick" not in rows["8"]


def test_the_new_figures_come_from_the_record():
    for record in (_unconfirmed(), _keep_yours()):
        md = markdown_text(MarkdownRenderer().render(record))
        assert unexplained_numbers(md, record) == []
        html = visible_html_text(HTMLRenderer(plots=False).render(record))
        assert unexplained_numbers(html, record) == []


def test_a_factory_default_baseline_is_named_once_in_the_gain():
    record = _record()
    record["baseline"]["label"] = "yours (make_loader's defaults)"
    text = " ".join(ConsoleRenderer(width=140).render(record).split())
    assert "× yours (make_loader's defaults)" in text
    assert "your loader yours" not in text


def test_steps_not_measured_for_one_reason_share_a_line():
    from stallscope.analysis.run_verdict import decide
    from stallscope.render.document_verdict import _by_reason

    verdict = decide(_record())
    verdict.not_measured = [("Prefix cache", "the factory builds it"), ("Stages", "no Dataset")]
    verdict.not_measured.append(("Integer transfer", "the factory builds it"))
    assert _by_reason(verdict) == [
        ("Prefix cache, Integer transfer", "the factory builds it"),
        ("Stages", "no Dataset"),
    ]
