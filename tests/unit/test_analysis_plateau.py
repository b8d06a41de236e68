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


def _record(trials, raced=((2, 105.0), (8, 100.0)), baseline=None):
    record = {
        "best": {
            "config": _config(2, persistent_workers=True),
            "samples_per_s": 105.0,
            "head_to_head": [{"config": _config(w), "samples_per_s": rate} for w, rate in raced],
        },
        "trials": [
            {"config": _config(w), "label": f"w={w} bs=32 pf=2", "samples_per_s": rate}
            for w, rate in trials
        ],
    }
    if baseline is not None:
        record["baseline"] = {"config": _config(baseline), "samples_per_s": 90.0}
    return record


def test_configs_within_the_runs_own_spread_are_named_fastest_first():
    # w=2 measured 100, 105, 110: spread 10/105; w=8 90 and 100: 10/95. Band: their median.
    record = _record(
        [(2, 100), (2, 105), (2, 110), (8, 90), (8, 100), (3, 99), (4, 80), (5, 112), (6, 96)]
    )
    found = plateau(record)
    band = ((10 / 105) + (10 / 95)) / 2
    assert found is not None and found.band == round(band, 4)
    # w=5 is faster, w=3 and w=6 within the band (not raced); w=8 raced and lost by 100/105, less
    # than the band; w=4 (76%) is not within it
    assert found.configs == [
        ("w=5 bs=32 pf=2", round(112 / 105, 4), False),
        ("w=8 bs=32 pf=2", round(100 / 105, 4), True),
        ("w=3 bs=32 pf=2", 0.9429, False),
        ("w=6 bs=32 pf=2", 0.9143, False),
    ]


def test_a_config_never_raced_and_faster_beyond_the_noise_is_named_apart():
    # w=4 measured once at 140 (a scan's short window): 133% of the winner, beyond the 10% band.
    record = _record([(2, 100), (2, 105), (2, 110), (8, 90), (8, 100), (4, 140), (3, 99)])
    found = plateau(record)
    assert found is not None
    assert ("w=4 bs=32 pf=2", round(140 / 105, 4)) in found.beyond
    assert "w=4 bs=32 pf=2" not in [label for label, _, _ in found.configs]
    verdict = decide(record)
    assert verdict.to_dict()["faster_not_raced"] == [
        {"label": "w=4 bs=32 pf=2", "ratio": round(140 / 105, 4)}
    ]


def test_a_raced_config_beaten_beyond_the_noise_and_the_users_own_are_not_named():
    trials = [(2, 100), (2, 105), (2, 110), (8, 70), (8, 72), (0, 99)]
    found = plateau(_record(trials, raced=((2, 105.0), (8, 71.0)), baseline=0))
    assert found is not None and found.configs == []  # w=8 at 68%; w=0 is the keep-yours rule's


def test_nothing_is_named_without_a_race_or_a_config_measured_twice():
    assert plateau(_record([(2, 100), (3, 99)], raced=())) is None
    assert plateau(_record([(2, 100), (3, 99)])) is None  # no config measured twice


def test_the_verdict_names_them_on_every_surface():
    record = json.loads((FIXTURES / "record_tune.json").read_text())
    verdict = decide(record)
    assert verdict.action == "switch" and verdict.tied_with == "w=2 bs=16 pf=2 unordered"
    # the tie is named by its own sentence; w=3 was measured once, at 98% of the winner
    named = verdict.to_dict()["within_noise"]["configs"]
    assert [c["label"] for c in named] == ["w=2 bs=16 pf=4", "w=3 bs=16 pf=2"]
    assert [c["raced"] for c in named] == [True, False]
    text = " ".join(MarkdownRenderer().render(record).split())
    assert "so another run may name one of these: `w=2 bs=16 pf=4` (99.5%, raced)" in text
    assert "`w=3 bs=16 pf=2` (98.3%, not raced)." in text


def test_doctors_sweep_names_the_configs_its_tuner_did_not_measure_again():
    # The sweep measured w=1, w=2 and w=4; the tuner measured w=2 and w=8 only. w=4 (sweep median
    # 101, 96% of the winner's 105) is within the band; w=1 (60%) is not; w=2 is the tuner's.
    record = _record([(2, 100), (2, 105), (2, 110), (8, 90), (8, 100)])
    record["results"] = [
        {
            "config": _config(w),
            "label": f"w={w} bs=32 pf=2",
            "samples_per_s": {"median": rate, "min": rate * 0.95, "max": rate * 1.05},
        }
        for w, rate in ((1, 63.0), (2, 104.0), (4, 101.0))
    ]
    found = plateau(record)
    assert found is not None
    assert found.configs == [
        ("w=4 bs=32 pf=2", round(101 / 105, 4), False),
        ("w=8 bs=32 pf=2", round(100 / 105, 4), True),
    ]
