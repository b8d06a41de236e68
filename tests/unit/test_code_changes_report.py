"""The code-change section of a record: analysis facts and every renderer (fixed record,
no probes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from report_numbers import markdown_text, unexplained_numbers

from stallscope.analysis.code_changes import code_change_facts
from stallscope.render.console import ConsoleRenderer
from stallscope.render.html import HTMLRenderer
from stallscope.render.markdown import MarkdownRenderer
from stallscope.schema import record_schema

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DIFF = """--- data.py
+++ data.py
@@ -1,3 +1,4 @@
 image = Image.open(handle)
+image.draft("RGB", (image.width // 2, image.height // 2))  # decode JPEGs at 1/2 size
 return image.convert("RGB")
"""


def record() -> dict:
    data = json.loads((FIXTURES / "record_doctor.json").read_text())
    data["code_changes"] = [
        {
            "id": "prefix-cache",
            "title": "Keep the deterministic prefix",
            "speedup": 1.84,
            "rounds": 3,
            "samples_per_s": 412.5,
            "pick_samples_per_s": 224.2,
            "diff": None,
            "description": "In Folder.__getitem__, look the index up in a cache first.",
            "verified": False,
            "unverified_reason": "no line `x = self.transform(x)` in __getitem__",
            "side_effect": {
                "summary": (
                    "caches read + decode in shared memory; later passes give the same samples"
                ),
                "alters_output": False,
            },
            "error": None,
        },
        {
            "id": "reduced-decode",
            "title": "Reduced-size decode",
            "speedup": 1.41,
            "rounds": 3,
            "samples_per_s": 316.1,
            "pick_samples_per_s": 224.2,
            "diff": DIFF,
            "description": "draft mode",
            "verified": True,
            "unverified_reason": None,
            "side_effect": {
                "summary": "alters what the model sees: PSNR 44.0 dB on average",
                "alters_output": True,
                "psnr_db": 44.0,
            },
            "error": None,
        },
        {
            "id": "batch-augment",
            "title": "Batch-level augmentation",
            "speedup": 0.7,
            "rounds": 3,
            "samples_per_s": 156.9,
            "pick_samples_per_s": 224.2,
            "diff": None,
            "description": "per batch",
            "verified": True,
            "unverified_reason": None,
            "side_effect": {"summary": "deterministic", "alters_output": False},
            "error": None,
        },
    ]
    data["code_changes_run"] = {
        "pick": {"config": data["best"]["config"], "label": "w=2 bs=32", "samples_per_s": 224.2},
        "items": 200,
        "rounds": 3,
        "seconds": 28.5,
        "budget_s": 30.0,
        "not_applied": [
            {
                "id": "integer-transfer",
                "title": "Integer transfer",
                "why": "no transform turns a uint8 image into a float tensor",
            }
        ],
        "notes": [],
    }
    return data


def test_the_code_change_sections_are_valid():
    schema = record_schema()
    data = record()
    for key in ("code_changes", "code_changes_run"):
        jsonschema.validate(
            data[key], {**schema["properties"][key], "$defs": schema.get("$defs", {})}
        )


def test_facts_order_by_speedup_and_name_the_best_worth_it():
    facts = code_change_facts(record())
    assert [r.id for r in facts.rows] == ["prefix-cache", "reduced-decode", "batch-augment"]
    assert facts.best.id == "prefix-cache"
    assert facts.rounds == 3 and facts.items == 200 and facts.pick_label == "w=2 bs=32"
    assert facts.not_applied == [
        ("Integer transfer", "no transform turns a uint8 image into a float tensor")
    ]
    assert code_change_facts({"command": "doctor"}) is None


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_documents_show_speedup_rounds_side_effect_and_only_verified_diffs(fmt):
    data = record()
    text = (
        MarkdownRenderer().render(data) if fmt == "md" else HTMLRenderer(plots=False).render(data)
    )
    assert "Code changes, applied and measured" in text
    assert "1.84×" in text and "3 interleaved rounds" in text
    assert "Alters what the model sees:" in text and "PSNR 44.0 dB" in text
    assert "image.draft(" in text  # the verified diff
    assert "no diff shown: no line" in text  # the unverified one, in words with why
    assert "not applied" in text and "Integer transfer" in text
    assert "Code change: keep the deterministic prefix measured 1.84×" in text


def test_markdown_numbers_come_from_the_record_and_the_section_follows_the_stages():
    data = record()
    md = MarkdownRenderer().render(data)
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    assert (
        headings.index("Code changes, applied and measured")
        == headings.index("Stage breakdown") + 1
    )
    assert unexplained_numbers(markdown_text(md), data) == []


def test_console_prints_the_table_and_the_diff_of_a_change_worth_it():
    text = ConsoleRenderer().render(record())
    assert "Code changes, applied and measured against the knob config they raced" in text
    assert "image.draft(" in text and "1.41×" in text
    assert "not applied: Integer transfer" in text


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_a_run_where_no_change_applied_says_so_and_no_race(fmt):
    # Nothing applied (a dataset of an installed package's class): no race of 0 items in 0 rounds.
    data = record()
    data["code_changes"] = []
    data["code_changes_run"].update(items=0, rounds=0)
    text = (
        MarkdownRenderer().render(data) if fmt == "md" else HTMLRenderer(plots=False).render(data)
    )
    assert "Integer transfer" in text and "no transform turns a uint8 image" in text
    assert "0 interleaved rounds" not in text and "raced against the knob config" not in text
