"""One verdict per run (NOTE [one verdict]) and the invariants checked before it is printed (NOTE
[invariants]): fake records that break each one, and the figure each must drop."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

from stallscope.analysis import best_configuration, recommendations
from stallscope.analysis.ceiling import ceiling_facts
from stallscope.analysis.invariants import checked_confidence, sample_unit
from stallscope.analysis.run_verdict import decide
from stallscope.analysis.tune_rules import tune_pick
from stallscope.record import RunRecord
from stallscope.render.console import ConsoleRenderer
from stallscope.render.html import HTMLRenderer
from stallscope.render.json_renderer import JSONRenderer
from stallscope.render.markdown import MarkdownRenderer
from stallscope.schema import record_schema

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"record_{name}.json").read_text())


def surfaces(record: dict) -> dict[str, str]:
    return {
        "console": " ".join(ConsoleRenderer(width=140).render(record).split()),
        "md": MarkdownRenderer().render(record),
        "html": HTMLRenderer(plots=False).render(record),
    }


def cfg(workers: int, bs: int = 1, **extra) -> dict:
    return {
        "num_workers": workers,
        "batch_size": bs,
        "prefetch_factor": 2 if workers else None,
        "persistent_workers": False,
        "pin_memory": False,
        "in_order": True,
        **extra,
    }


def _result(config: dict, rate: float, *, per_batch: int, repeats: int = 2) -> dict:
    bench = load("bench")["results"][0]
    res = copy.deepcopy(bench)
    res.update(
        config=config,
        label=f"w={config['num_workers']} bs={config['batch_size']}",
        samples_per_s={"median": rate, "min": rate * 0.98, "max": rate * 1.02},
        batches_per_s={
            "median": rate / per_batch,
            "min": rate / per_batch,
            "max": rate / per_batch,
        },
        samples_measured=per_batch * 40,
        batches_measured=40,
        repeats=repeats,
        speedup=None,
        efficiency=None,
    )
    return res


def token_buffer_record(*, timed: bool) -> dict:
    """An LLM pre-training loader yielding one flat token buffer of 8,192 per step, no batch
    dimension: the loader batches itself, the config says bs=1, and the main process's receive
    cost per "batch of 1" made a ceiling of 3,452 samples/s that the rate beat 292 times."""
    r = load("bench")
    per_batch = 8192 if timed else 1
    r["results"] = [_result(cfg(0), 1_008_903.0, per_batch=per_batch)]
    if not timed:
        for res in r["results"]:
            res.pop("samples_measured")
            res.pop("batches_measured")
    r["scaling"] = {"cores": 2, "best_index": 0}
    r["dataset"] = dict(r["dataset"], item=None, batch="Tensor[8192] int64", batch_size=1)
    r.pop("cpu_cost")
    r["ceiling"] = {
        "samples_per_s": 3452.0,
        "basis": "main-process",
        "pick_fraction": 292.255,
        "pick_label": "w=0 bs=1",
        "pick_source": "bench",
        "pick_samples_per_s": 1_008_903.0,
        "usable_cores": 2,
        "cpu_ms_per_sample": 0.0005,
        "cpu_samples_per_s": None,
        "main_ms_per_batch": 0.2897,
        "batch_size": 1,
        "main_process_samples_per_s": 3452.0,
        "pick_cpu_cores": 1.0,
        "others_busy_cores": 0.0,
    }
    return r


# -- ceiling: a share above 100% is a bug -------------------------------------------------------


def test_a_share_of_the_ceiling_above_100_percent_is_never_printed():
    record = token_buffer_record(timed=False)
    facts = ceiling_facts(record)
    assert facts is not None and facts.ceiling is None and facts.ceiling_sentence is None
    assert facts.problem is not None and facts.problem.action == "dropped"
    verdict = decide(record)
    assert verdict.ceiling_share is None
    assert any(what == "the ceiling" for what, _ in verdict.not_measured)
    for name, text in surfaces(record).items():
        assert "reaches 29" not in text and "ceiling of 3,452" not in text, name
        assert "Bug caught before printing" in text, name
        assert "reads 29,225.5%" in text or "reads 29225.5%" in text, name


def test_a_share_above_100_percent_is_recomputed_over_the_batch_that_ran():
    record = token_buffer_record(timed=True)
    facts = ceiling_facts(record)
    assert facts is not None and facts.ceiling is not None
    assert facts.problem is not None and facts.problem.action == "recomputed"
    # 8,192 tokens per batch over 0.2897 ms of receiving: the main process's limit, in tokens/s.
    assert facts.ceiling["samples_per_s"] == pytest.approx(8192 / 0.0002897, rel=1e-3)
    assert 0 < facts.ceiling["pick_fraction"] <= 1.0
    verdict = decide(record)
    assert verdict.ceiling_share == facts.ceiling["pick_fraction"]
    assert verdict.sample_unit == "tokens"
    # The label says the batch that ran (read from the batches), not bs=1.
    assert verdict.label == "w=0 bs=8192"
    assert any(p.action == "relabelled" for p in verdict.problems)
    console = surfaces(record)["console"]
    assert "tokens/s" in console and "A sample here is one of the tokens" in console
    # Every table and sentence labels the config as it ran, the ceiling's too.
    assert facts.ceiling["pick_label"] == "w=0 bs=8192"
    for name, text in surfaces(record).items():
        # bs=1 only where the bug is said
        assert re.findall(r"bs=1\b", text) == ["bs=1"] and "said bs=1," in text, name


def test_a_share_at_or_below_100_percent_is_kept_as_measured():
    record = load("bench")
    facts = ceiling_facts(record)
    assert facts is not None and facts.problem is None
    # Judged again from the record's measurements, it says what the command stored (the record
    # predates the one-process figure, which it adds).
    assert {key: facts.ceiling[key] for key in record["ceiling"]} == record["ceiling"]
    assert decide(record).ceiling_share == record["ceiling"]["pick_fraction"]


def test_report_judges_the_ceiling_again_with_todays_rules():
    # The demo's shape at 1faab48, stored as the command judged it then: 112% of a ceiling from the
    # probe's CPU per sample. Rendered today, the pick's own windows (2.0 of 2 cores busy) make the
    # ceiling, and no bug is said.
    from stallscope.analysis.ceiling import ceiling_section

    record = load("bench")
    pick = max(record["results"], key=lambda res: res["samples_per_s"]["median"])
    rate = pick["samples_per_s"]["median"]
    cores = record["cpu_cost"]["usable_cores"]
    pick["cpu_ms_per_sample"] = 1000.0 * cores / rate  # every core busy in its windows
    record["cpu_cost"]["cpu_s_per_sample"] = 1.12 * cores / rate  # the probe read 12% more
    stored = dict(ceiling_section(record), basis="cpu", pick_fraction=1.122)
    record["ceiling"] = stored
    facts = ceiling_facts(record)
    assert facts.problem is None and facts.ceiling["basis"] == "saturated"
    assert facts.ceiling["pick_fraction"] == 1.0
    for name, text in surfaces(record).items():
        assert "Bug caught" not in text and "112" not in text, name


# -- confidence: never above what the rounds support -------------------------------------------


@pytest.mark.parametrize(
    ("confidence", "rounds", "kept"),
    [(0.9, 2, True), (0.95, 2, False), (0.8, 1, False), (0.5, None, False), (0.97, 4, True)],
)
def test_a_confidence_is_kept_only_where_its_rounds_support_it(confidence, rounds, kept):
    value, problem = checked_confidence(confidence, rounds)
    assert (value == confidence) is kept and (problem is None) is kept


def test_a_confidence_from_two_rounds_above_the_cap_is_dropped_everywhere():
    record = load("tune")
    record["best"].update(rounds=2, confidence=0.97, confirmed=True, tie=False)
    verdict = decide(record)
    assert verdict.confidence is None
    assert [p.figure for p in verdict.problems] == ["the confidence"]
    for name, text in surfaces(record).items():
        assert "Confidence 97" not in text and "confidence: 97" not in text, name
        assert "Bug caught before printing: the confidence reads 97%" in text, name
        assert "No confidence is stated: the one recorded broke an invariant" in text, name
    assert json.loads(JSONRenderer().render(record))["analysis"]["confidence"] is None


# -- labels: the config that ran ------------------------------------------------------------------


def factory_record() -> dict:
    """A thread-pool library's loader built by ``make_loader(num_workers=None)`` (8 threads by
    its own default); the config knows it only as num_workers=0."""
    r = load("tune")
    r["loader_kind"] = {
        "name": "factory",
        "description": "a ThreadedLoader, built by make_loader() with knob parameters",
        "knobs": ["num_workers"],
        "limits": {},
    }
    r["loader"] = dict(
        r["loader"], origin="make_loader()", factory_parameters={"workers": "num_workers"}
    )
    base = r["baseline"]["samples_per_s"]
    r["best"] = dict(r["best"], samples_per_s=base * 1.02, speedup=1.02, keep_baseline=False)
    r.pop("ceiling", None)
    r.pop("loader_code", None)
    return r


def test_the_factorys_own_defaults_are_labelled_as_yours_not_w0():
    record = factory_record()
    verdict = decide(record)
    assert verdict.action == "keep-yours"  # 2% is inside the noise
    assert verdict.label == "yours (make_loader's defaults)"
    for name, text in surfaces(record).items():
        assert "yours (make_loader's defaults)" in text or "yours (make_loader&#x27;s" in text, name
        # The factory's own default is never shown as a worker count of 0, tables included.
        assert "w=0" not in text, name


def test_a_factorys_configs_show_only_the_knobs_its_parameters_take():
    record = factory_record()  # make_loader takes num_workers only
    base = record["baseline"]["samples_per_s"]
    record["best"] = dict(record["best"], samples_per_s=base * 3, speedup=3.0)
    verdict = decide(record)
    assert verdict.action == "switch"
    assert verdict.label == "w=2 bs=16"  # the trial's config held pf=2: the call never passed it
    head = " ".join(ConsoleRenderer(width=140).render(record).split("Evidence")[0].split())
    use = head[head.index("Use:") : head.index(".", head.index("Use:"))]
    assert use.startswith("Use: w=2 bs=16 at") and "pf=" not in use
    # The code was not run, so the change is said in words: only what make_loader takes.
    assert "Set num_workers=2 where you build" in head and "prefetch_factor" not in head


def test_sample_unit_is_named_from_the_batch_where_it_says():
    assert sample_unit(load("bench")) == "images"
    assert sample_unit(load("doctor")) is None  # 4 float features per row: not named
    assert sample_unit({"dataset": {"batch": "dict(input_ids=Tensor[8,512] int64)"}}) == (
        "sequences"
    )


# -- one winner, one rule ---------------------------------------------------------------------


def test_a_gain_inside_the_noise_is_keep_yours_in_tune_and_doctor_alike():
    tune = load("tune")
    tune["best"].update(speedup=1.02, keep_baseline=False)
    tune["best"]["samples_per_s"] = tune["baseline"]["samples_per_s"] * 1.02
    doctor = load("doctor")
    for key in ("baseline", "best", "search", "trials"):
        doctor[key] = copy.deepcopy(tune[key])
    doctor.pop("results")  # no sweep row to overrule the pick
    doctor.pop("scaling")
    for record in (tune, doctor):
        verdict = decide(record)
        assert verdict.action == "keep-yours"
        assert verdict.config == tune["baseline"]["config"]
        assert best_configuration(record).keep_baseline
        assert [r.id for r in recommendations(record)][0] == "keep-yours"
    assert tune_pick(tune)["id"] == "keep-yours"
    assert "a gain the noise" in tune_pick(tune)["detail"]


def test_a_users_config_that_failed_in_the_tuner_is_never_kept_at_zero():
    # Its forked workers hung (NOTE [fork after use]): 0 samples/s is no rate to keep.
    tune = load("tune")
    baseline = tune["baseline"]
    baseline["samples_per_s"] = 0.0
    tune["best"].update(speedup=None, keep_baseline=False, gain_interval=None)
    raced = tune["best"]["head_to_head"]
    tune["best"]["head_to_head"] = [h for h in raced if h["config"] != baseline["config"]]
    tune["trials"].append(
        {
            "config": baseline["config"],
            "samples_per_s": 0.0,
            "error": "no batch arrived within 15 s",
        }
    )
    assert tune["best"]["config"] != baseline["config"]
    verdict = decide(tune)
    assert verdict.action == "switch" and verdict.config == tune["best"]["config"]
    assert dict(verdict.not_measured)["an interval for the gain"] == (
        "your loader did not race the pick: it gave no rate here (no batch arrived within 15 s)"
    )
    pick = tune_pick(tune)
    assert pick["id"] == "loader-config"
    assert pick["expected_gain"] == "not measured: your config failed here"
    assert "yours gave no rate here (no batch arrived within 15 s)" in pick["measured"]


def test_the_sweeps_fastest_is_never_called_best_when_it_tied_the_race():
    record = load("doctor")
    sweep_best = record["results"][record["scaling"]["best_index"]]
    record["best"].update(
        tie=True,
        runner_up=sweep_best["label"],
        margin=0.96,
        margin_interval=[0.9, 1.05],
        rounds=3,
        confidence=0.6,
        head_to_head=[
            {
                "config": sweep_best["config"],
                "label": sweep_best["label"],
                "samples_per_s": 3600.0,
                "rounds": 3,
                "role": "sweep-best",
            },
            {
                "config": record["best"]["config"],
                "label": record["best"]["label"],
                "samples_per_s": record["best"]["samples_per_s"],
                "rounds": 3,
                "role": "tuner",
            },
        ],
    )
    verdict = decide(record)
    assert verdict.label == record["best"]["label"] != sweep_best["label"]
    assert verdict.tied_with == sweep_best["label"] == verdict.fastest_in_sweep
    for name, text in surfaces(record).items():
        assert "Best:" not in text and "Best configuration" not in text, name
        assert "fastest in the sweep" in text.lower(), name
        assert "within the noise, so the cheaper config was kept" in text, name


# -- the JSON's analysis block ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bench", "tune", "doctor", "check", "compare"])
def test_the_json_carries_the_verdict_which_loading_drops_and_report_recomputes(name, tmp_path):
    record = load(name)
    path = tmp_path / "run.json"
    JSONRenderer().write(record, path)
    written = json.loads(path.read_text())
    jsonschema.validate(written, record_schema())
    assert written["analysis"] == json.loads(json.dumps(decide(record).to_dict()))
    # A stale block (an older stallscope's, or edited) is dropped on load, never read.
    written["analysis"]["label"] = "stale"
    loaded = RunRecord.from_dict(written)
    assert "analysis" not in loaded.to_dict()
    assert json.loads(JSONRenderer().render(loaded))["analysis"]["label"] == decide(record).label
    with pytest.raises(Exception, match="analysis"):
        RunRecord(command=name, target="t", host={}).add(analysis={})  # no probe writes it


def test_doctor_races_code_changes_against_the_verdicts_config(monkeypatch):
    import stallscope.changes as changes
    from stallscope.commands import doctor

    record_dict = load("tune")
    record_dict["best"].update(speedup=1.01, keep_baseline=False)  # inside the noise: keep yours
    record = RunRecord.from_dict({**record_dict, "command": "doctor"})
    seen = {}

    def fake_code_changes(pipeline, config, **kwargs):
        seen["config"] = config
        return SimpleNamespace(to_dict=lambda: {})

    monkeypatch.setattr(changes, "code_changes", fake_code_changes)
    doctor._step_changes(None, SimpleNamespace(changes_budget=None), lambda *a, **k: None, record)
    assert seen["config"].to_dict() == {
        **seen["config"].to_dict(),
        **record_dict["baseline"]["config"],
    }
    assert seen["config"].num_workers == record_dict["baseline"]["config"]["num_workers"]
    assert seen["config"].num_workers != record_dict["best"]["config"]["num_workers"]


def test_an_unconfirmed_pick_says_another_run_may_pick_another_config():
    record = load("tune")  # raced one round: no confidence
    assert record["best"]["rounds"] == 1 and record["best"]["confidence"] is None
    for name, text in surfaces(record).items():
        assert "Not confirmed: 1 paired round raced" in text, name
        assert "another run (doctor or tune) may pick another config" in text, name


def _raced_twice(record: dict, interval: list[float]) -> dict:
    """The tune fixture as if its race had run two paired rounds with the user's loader."""
    best = record["best"]
    best["rounds"], best["confidence"], best["confirmed"] = 2, 0.8, True
    for row in best["head_to_head"]:
        row["rounds"] = 2
    best["gain_interval"] = interval
    return record


def test_the_gain_comes_with_the_interval_of_its_paired_rounds_on_every_surface():
    record = load("tune")
    gain = record["best"]["speedup"]
    record = _raced_twice(record, [round(gain * 0.9, 4), round(gain * 1.1, 4)])
    jsonschema.validate(record, record_schema())
    verdict = decide(record)
    assert verdict.gain_interval == [round(gain * 0.9, 4), round(gain * 1.1, 4)]
    assert "an interval for the gain" not in [what for what, _ in verdict.not_measured]
    lo, hi = (f"{x:.2f}×" for x in verdict.gain_interval)
    for name, text in surfaces(record).items():
        assert f"90% interval of the paired ratio {lo}–{hi}" in text, name


def test_an_interval_that_does_not_hold_the_gain_is_not_stated():
    record = load("tune")
    gain = record["best"]["speedup"]
    verdict = decide(_raced_twice(record, [round(gain * 1.2, 4), round(gain * 1.4, 4)]))
    assert verdict.gain_interval is None
    why = dict(verdict.not_measured)["an interval for the gain"]
    assert "rounds disagree" in why
    assert "paired ratio" not in " ".join(surfaces(record).values())


def test_the_sentence_for_unrun_code_names_only_what_the_factory_takes():
    from stallscope.analysis.tune_rules import advice_in_words

    advice = {
        "config": cfg(2, 16),
        "baseline": cfg(0, 16),
        "kind_description": "a ThreadedLoader, built by make_loader() with knob parameters",
        "knobs": ["num_workers"],
        "reason": "no call with these settings was run",
    }
    words = advice_in_words(advice)
    assert words.startswith("Set num_workers=2 where you build a ThreadedLoader")
    assert "prefetch_factor" not in words
    advice["knobs"] = None  # a DataLoader rebuilt from its parts: every changed argument
    assert "prefetch_factor=2" in advice_in_words(advice)


def test_a_baseline_that_did_not_race_is_never_said_to_be_in_the_same_race():
    record = load("tune")
    best = record["best"]
    best["head_to_head"] = [h for h in best["head_to_head"] if h["role"] != "baseline"]
    verdict = decide(record)
    assert verdict.rounds and verdict.baseline_rounds == 0
    assert "did not race the pick" in dict(verdict.not_measured)["an interval for the gain"]
    for name, text in surfaces(record).items():
        assert "in the same race" not in text, name
        assert "single measurement: it did not race" in text, name
    raced = decide(load("tune"))  # the fixture's baseline raced its one round
    assert raced.baseline_rounds == 1
    assert "in the same race" in surfaces(load("tune"))["console"]


def test_a_baseline_the_budget_left_out_of_the_race_is_said_so():
    record = load("tune")
    best = record["best"]
    best["head_to_head"] = [h for h in best["head_to_head"] if h["role"] != "baseline"]
    best["skipped"] = [
        *best.get("skipped", []),
        {
            "label": record["baseline"]["label"],
            "why": "left out of the race: 2 round(s) of 4 configs did not fit the time budget",
        },
    ]
    why = dict(decide(record).not_measured)["an interval for the gain"]
    assert why == "your loader did not race the pick: the time budget left it out of the race"
