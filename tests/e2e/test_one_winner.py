"""One run, one answer: the console, Markdown, HTML and JSON of a ``bench``, ``tune`` and ``doctor``
name the same winner, the same verdict sentence about it and the same recommendations (all of them
read one verdict, NOTE [one verdict] in ``analysis/run_verdict.py``)."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stallscope.analysis import best_configuration
from stallscope.analysis.run_verdict import decide
from stallscope.render import document_model as dm
from stallscope.render.document_checks import recommendation_parts
from stallscope.render.document_verdict import _SAID_BY_THE_VERDICT, verdict_blocks

PIPELINES = Path(__file__).parent.parent / "pipelines"
TARGET = "tune_pipelines.py:waiting_loader"


class _Plain(dm.DocumentWriter):
    def text(self, text):
        return str(text)

    def code(self, text):
        return text

    def strong(self, text):
        return text

    def status(self, value):
        return value


def _words(text: str) -> str:
    """Text without markup or line breaks, for comparing what each surface says."""
    text = re.sub(r"</?(code|strong|b|em|span|a)\b[^>]*>", "", text)  # inline HTML tags
    text = re.sub(r"<[^>]+>", " ", text)  # block HTML tags
    text = html.unescape(text).replace("**", "").replace("`", "")
    return " ".join(text.split())


@pytest.mark.parametrize(
    "command",
    [
        ["bench", "--num-workers", "0,2", "--repeats", "1", "--window", "0.4"],
        # what is checked is that every surface names the one winner, whichever it is: a short
        # tuner budget still races one
        ["tune", "--budget", "5"],
        [
            "doctor",
            "--budget",
            "5",
            "--skip",
            "check,stages,changes",
            "--repeats",
            "1",
            "--num-workers",
            "0,1,2",  # the sweep's fastest races the tuner's finalists, whichever it is
        ],
    ],
    ids=["bench", "tune", "doctor"],
)
def test_every_surface_names_the_same_winner_and_advice(command, tmp_path):
    _one_story(command, TARGET, tmp_path)


# Loaders that are not DataLoaders, each built by a factory that takes knob parameters: a
# torchdata.nodes graph, a thread-pool stream, and a pre-training loader that yields one flat token
# buffer per step (no batch dimension; its "sample" is a token).
NOT_DATALOADERS = [
    "real_loader_kinds.py:nodes_graph",
    "real_loader_kinds.py:threaded_stream",
    "real_lm_stream.py:make_loader",
]


@pytest.mark.parametrize("target", NOT_DATALOADERS, ids=lambda t: t.split(":")[1])
def test_loaders_that_are_not_dataloaders_tell_one_story(target, tmp_path):
    doctor = ["doctor", "--budget", "4", "--skip", "check,stages,changes", "--repeats", "1"]
    record, surfaces = _one_story(doctor, target, tmp_path)
    ceiling = record["analysis"]["ceiling"]
    assert ceiling is None or 0 < ceiling["share"] <= 1.0, ceiling
    for name, text in surfaces.items():  # no printed share of a ceiling above 100%
        shares = re.findall(r"([\d,.]+)% of (?:this machine's|the) ceiling", text)
        assert all(float(x.replace(",", "")) <= 100 for x in shares), (name, shares)


def _one_story(command: list[str], target: str, tmp_path: Path) -> tuple[dict, dict[str, str]]:
    """Run ``command`` on ``target`` with every output; each surface names the verdict's config,
    with its first sentence and its recommendations, and none calls another config best."""
    out = {ext: tmp_path / f"run.{ext}" for ext in ("json", "md", "html")}
    args = [
        *command[:1],
        target,
        *command[1:],
        "--json",
        str(out["json"]),
        "--md",
        str(out["md"]),
        "--html",
        str(out["html"]),
    ]
    if command[0] == "doctor":
        args += ["--out", str(tmp_path / "report")]
    done = subprocess.run(
        [sys.executable, "-m", "stallscope", *args],
        cwd=PIPELINES,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if command[0] == "doctor":  # every report has its own path: no empty --out folder is made
        assert not (tmp_path / "report").exists()
    record = json.loads(out["json"].read_text())
    surfaces = {
        "console": _words(done.stdout),
        "md": _words(out["md"].read_text()),
        "html": _words(out["html"].read_text()),
    }

    winner = best_configuration(record)
    verdict = decide(record)
    assert winner is not None and verdict.config == winner.config
    # The JSON carries the same verdict, derived (SPEC §5 "analysis").
    assert record["analysis"]["label"] == verdict.label
    assert record["analysis"]["config"] == verdict.config
    first = verdict_blocks(record, verdict)[0]
    assert isinstance(first, dm.Paragraph)
    sentence = _words(_Plain().inline(first.parts))
    for name, text in surfaces.items():
        assert verdict.label in text, name
        assert sentence in text, (name, sentence)  # the same sentence, first
        assert "Best:" not in text and "Best configuration" not in text, name
    if command[0] != "bench":
        assert record["loader_code"]["config"] == winner.config  # the printed code is the winner's
    advice = [
        _words(_Plain().inline(recommendation_parts(rec)))
        for rec in verdict.recommendations
        if rec.id not in _SAID_BY_THE_VERDICT
    ]
    for line in advice:
        for name, text in surfaces.items():
            assert line in text, (name, line)
    return record, surfaces
