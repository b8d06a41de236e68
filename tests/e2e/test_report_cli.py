"""``stallscope report``, reports of a real run, and the HTML as a browser shows it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from PIL import Image
from report_numbers import markdown_text, unexplained_numbers, visible_html_text

from stallscope.commands import report

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
DOCTOR = FIXTURES / "record_doctor.json"


def test_report_writes_markdown_html_and_plots(tmp_path, capsys):
    md, page, folder = (
        tmp_path / "r" / "report.md",
        tmp_path / "r" / "report.html",
        tmp_path / "r" / "plots",
    )
    assert (
        report.main([str(DOCTOR), "--md", str(md), "--html", str(page), "--plots", str(folder)])
        == 0
    )
    out = capsys.readouterr().out
    assert f"wrote {md}" in out and f"wrote {page}" in out
    assert sorted(p.name for p in folder.iterdir()) == [
        "latency.png",
        "scaling.png",
        "stages.png",
        "timeline.png",
    ]
    assert "](plots/scaling.png)" in md.read_text()
    assert page.read_text().count("data:image/png;base64,") == 4


def test_report_of_a_record_keeps_its_own_duration(tmp_path):
    md = tmp_path / "report.md"
    assert report.main([str(FIXTURES / "record_tune.json"), "--md", str(md), "--quiet"]) == 0
    duration = json.loads((FIXTURES / "record_tune.json").read_text())["duration_s"]
    # The tune run's duration, not the report command's.
    assert f"for {duration:.1f} s" in md.read_text()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{not json", "is not JSON"),
        ('{"schema": 1}', "is not a stallscope run record"),
        (
            '{"schema": 7, "command": "bench", "target": "t", "host": {}}',
            "unsupported record schema 7",
        ),
        (
            '{"schema": 1, "command": "bench", "target": "t", "host": {}, "speed": 1}',
            "record key 'speed' is declared by no record section",
        ),
    ],
)
def test_report_rejects_bad_records_with_one_sentence(tmp_path, capsys, content, message):
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    assert report.main([str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert err.count(". ") == 0 and err.endswith(".")  # one sentence


def test_report_prints_the_report_to_the_console():
    proc = subprocess.run(
        [sys.executable, "-m", "stallscope", "report", str(FIXTURES / "record_bench.json")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "140"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "Verdict" in proc.stdout and "Use:" in proc.stdout
    best = json.loads((FIXTURES / "record_bench.json").read_text())["scaling"]["best_label"]
    assert best in proc.stdout


def test_reports_of_a_real_bench_run_contain_only_its_numbers(tmp_path, pipelines_dir):
    """A real sweep: every number in its report.md/report.html is checked against its
    report.json."""
    from stallscope.commands import bench

    out = tmp_path / "run"
    target = f"{pipelines_dir / 'bench_sleepy.py'}:sleepy"
    code = bench.main(
        [
            target,
            "--num-workers",
            "0,2",
            "--repeats",
            "1",
            "--window",
            "0.25",
            "--quiet",
            "--json",
            str(out / "report.json"),
            "--md",
            str(out / "report.md"),
            "--html",
            str(out / "report.html"),
        ]
    )
    assert code == 0
    record = json.loads((out / "report.json").read_text())
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert unexplained_numbers(markdown_text(md), record) == []
    assert unexplained_numbers(visible_html_text(page), record) == []
    assert (out / "report_plots" / "scaling.png").is_file()
    # Rendering the saved JSON again gives the same Markdown: the report depends on the record
    # alone.
    again = tmp_path / "again" / "report.md"
    assert report.main([str(out / "report.json"), "--md", str(again), "--quiet"]) == 0
    assert again.read_text() == md


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="Debian's chromium is not installed (apt-get install -y chromium); "
    "CI installs it to screenshot the HTML report",
)
def test_html_report_renders_in_headless_chromium(tmp_path):
    page = tmp_path / "report.html"
    assert report.main([str(DOCTOR), "--html", str(page), "--quiet"]) == 0
    shot = tmp_path / "shot.png"
    profile = tempfile.mkdtemp(prefix="stallscope-chromium-")
    try:
        proc = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                f"--screenshot={shot}",
                "--window-size=1200,2000",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert shot.is_file(), proc.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 2000)
    width, height = image.size
    colours = image.getcolors(maxcolors=width * height)
    background_count, background = max(colours)
    assert len(colours) > 50, "the screenshot is (nearly) one colour"
    drawn = 1 - background_count / (width * height)
    assert drawn > 0.05, f"only {drawn:.1%} of the screenshot differs from the background"
    # The inline CSS applied: the header band is dark, the page body light.
    r, g, b = image.getpixel((10, 10))
    assert r + g + b < 200
    assert sum(background) > 600
    # Tables and figures were laid out: many distinct rows carry drawn pixels.
    rows_with_ink = sum(
        1
        for y in range(0, height, 10)
        if len({image.getpixel((x, y)) for x in range(0, width, 25)}) > 1
    )
    assert rows_with_ink > 100
