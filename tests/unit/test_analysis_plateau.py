"""Configs the race never met, within this run's noise of the winner (NOTE [plateau])."""

from __future__ import annotations

import json
from pathlib import Path

from stallscope.analysis.plateau import plateau
from stallscope.analysis.run_verdict import decide
from stallscope.render.markdown import MarkdownRenderer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _config(workers, **more):
    return {"num_workers": workers, "batch_size": 32, "prefetch_factor": 2, **more}


def _record(trials, raced=(2, 8)):
    return {
        "best": {
            "config": _config(2, persistent_workers=True),
            "samples_per_s": 105.0,
            "head_to_head": [{"config": _config(w), "samples_per_s": 100.0} for w in raced],
        },
        "trials": [
            {"config": _config(w), "label": f"w={w} bs=32 pf=2", "samples_per_s": rate}
            for w, rate in trials
        ],
    }


def test_unraced_configs_within_the_runs_own_spread_are_named_fastest_first():
    # w=2 measured 100, 105, 110: spread 10/105; w=8 90 and 100: 10/95. Band: their median.
    record = _record(
        [(2, 100), (2, 105), (2, 110), (8, 90), (8, 100), (3, 99), (4, 80), (5, 112), (6, 96)]
    )
    found = plateau(record)
    band = ((10 / 105) + (10 / 95)) / 2
    assert found is not None and found.band == round(band, 4)
    labels = [label for label, _ in found.configs]
    # w=5 is faster, w=3 and w=6 within the band; w=4 (76%) is not; w=8 raced (the race judged it)
    assert labels == ["w=5 bs=32 pf=2", "w=3 bs=32 pf=2", "w=6 bs=32 pf=2"]
    assert [ratio for _, ratio in found.configs] == [round(112 / 105, 4), 0.9429, 0.9143]


def test_nothing_is_named_without_a_race_or_a_config_measured_twice():
    assert plateau(_record([(2, 100), (3, 99)], raced=())) is None
    assert plateau(_record([(2, 100), (3, 99)])) is None  # no config measured twice


def test_the_verdict_names_them_on_every_surface():
    record = json.loads((FIXTURES / "record_tune.json").read_text())
    verdict = decide(record)
    assert verdict.action == "switch" and verdict.within_noise  # w=3 single-measured at 98%
    assert verdict.to_dict()["within_noise"]["configs"][0]["label"] == "w=3 bs=16 pf=2"
    text = " ".join(MarkdownRenderer().render(record).split())
    assert "Not raced, but within this run's noise of it: `w=3 bs=16 pf=2` (98.3%)" in text
    assert "another run may name one of these" in text
