"""The race's confidence and tie (NOTE [what the confidence states]), with fixed per-round rates."""

from __future__ import annotations

import json
import math

import jsonschema
import pytest

from stallscope.config import LoaderConfig
from stallscope.render.console import ConsoleRenderer
from stallscope.render.html import HTMLRenderer
from stallscope.render.markdown import MarkdownRenderer
from stallscope.schema import record_schema
from stallscope.tuning.confidence import (
    CONFIDENT_ROUNDS,
    FEW_ROUNDS_CAP,
    MARGIN,
    RaceLog,
    at_least_probability,
    clearly_slower,
    decide,
    margin_interval,
)


def _cfg(w: int, **kw) -> LoaderConfig:
    return LoaderConfig(num_workers=w, batch_size=8, **kw)


def _log(samples: dict[LoaderConfig, list[float]]) -> RaceLog:
    """One round per position: samples[c][i] is c's rate in round i."""
    log = RaceLog()
    for i in range(max(len(v) for v in samples.values())):
        log.add({c: [v[i]] for c, v in samples.items() if i < len(v)})
    return log


# -- the confidence --------------------------------------------------------------------------------


def test_one_round_gives_no_confidence():
    decision = decide(_log({_cfg(2): [50.0], _cfg(4): [80.0]}))
    assert (
        decision.pick == _cfg(4)
        and decision.confidence is None
        and decision.margin_interval is None
    )


def test_two_rounds_never_claim_95_percent():
    # w=4 60% faster in both rounds: the old bootstrap over two rounds said 100%.
    decision = decide(_log({_cfg(2): [50.0, 51.0], _cfg(4): [80.0, 81.0]}))
    assert decision.pick == _cfg(4)
    assert decision.confidence is not None and decision.confidence <= FEW_ROUNDS_CAP < 0.95
    # Two rounds a few percent apart: far from sure (a t with one degree of freedom).
    close = decide(_log({_cfg(2): [100.0, 100.0], _cfg(4): [106.0, 104.0]}))
    assert close.pick == _cfg(4) and not close.tie
    assert close.confidence <= FEW_ROUNDS_CAP
    assert at_least_probability([math.log(1.06), math.log(1.04)]) < 0.95  # even before the cap


def test_four_clearly_separated_rounds_are_sure():
    samples = {_cfg(2): [50, 51, 49, 50.5], _cfg(4): [80, 81, 79, 80.5], _cfg(8): [70, 72, 69, 71]}
    decision = decide(_log(samples))
    assert CONFIDENT_ROUNDS == 4
    assert decision.pick == _cfg(4) and not decision.tie
    assert decision.confidence >= 0.99
    assert decision.runner_up == _cfg(8)
    lo, hi = decision.margin_interval
    assert lo <= decision.margin <= hi and lo > 1.0


def test_overlapping_rates_are_a_tie_and_the_cheaper_config_is_kept():
    # 8 workers lead by a median 1%, rounds overlap: within the 3% margin, so the cheaper w=4 is the
    # pick.
    samples = {_cfg(4): [100, 97, 103, 99, 101, 98], _cfg(8): [101, 99, 102, 101, 100, 100]}
    decision = decide(_log(samples))
    assert decision.leader == _cfg(8)
    assert decision.pick == _cfg(4) and decision.tie and decision.tie_margin == MARGIN
    assert decision.runner_up == _cfg(8)
    # The confidence is that the pick is no more than 3% slower: about 1% slower, rounds spread 2%.
    assert 0.9 < decision.confidence < 0.99
    # Rounds spread wider: the same 1% is no longer sure to stay within the margin.
    wide = {_cfg(4): [100, 92, 108, 95, 104, 97], _cfg(8): [101, 99, 102, 101, 100, 100]}
    assert decide(_log(wide)).pick == _cfg(4) and decide(_log(wide)).confidence < 0.9


def test_the_cheaper_config_leads_a_tie_with_fewer_threads():
    samples = {
        _cfg(2, worker_threads=8): [100, 101, 99, 100],
        _cfg(2, worker_threads=4): [99.5, 100.5, 99, 100],
    }
    decision = decide(_log(samples))
    assert decision.pick == _cfg(2, worker_threads=4) and decision.tie


def test_beyond_the_margin_the_faster_config_is_kept():
    samples = {_cfg(2): [90, 91, 89, 90, 91], _cfg(4): [100, 101, 99, 100, 102]}
    decision = decide(_log(samples))
    assert decision.pick == _cfg(4) and not decision.tie and decision.confidence >= 0.95


def test_paired_rounds_see_through_load_swings():
    # The machine's load swings the rates 3x between rounds; within every round w=4 is 10% faster.
    load = [1.0, 0.35, 1.6, 0.5, 1.3, 0.4]
    samples = {_cfg(2): [100 * f for f in load], _cfg(4): [110 * f for f in load]}
    decision = decide(_log(samples))
    assert decision.pick == _cfg(4) and decision.confidence >= 0.99
    # The winner flipping between rounds (10% either way): not sure at all.
    flipped = {
        _cfg(2): [100 * f for f in load],
        _cfg(4): [100 * f * (1.1 if i % 2 else 1 / 1.1) for i, f in enumerate(load)],
    }
    assert decide(_log(flipped)).confidence < 0.9


def test_every_rival_costs_some_confidence():
    pick = [100.0, 104.0, 98.0, 103.0, 101.0]
    rival = [96.0, 99.0, 95.0, 97.0, 97.0]
    one = decide(_log({_cfg(4): pick, _cfg(8): rival}))
    two = decide(_log({_cfg(4): pick, _cfg(8): rival, _cfg(16): rival}))
    assert one.pick == two.pick == _cfg(4)
    assert two.confidence < one.confidence
    alone = at_least_probability([math.log(a / b) for a, b in zip(pick, rival)])
    assert two.confidence == pytest.approx(max(0.0, 1 - 2 * (1 - alone)))


def test_the_noise_floor_keeps_agreeing_rounds_from_proving_too_much():
    # Four identical 1% wins: without a floor the spread is 0 and any gap is "certain".
    assert at_least_probability([math.log(1.01)] * 4, margin=0.0) < 0.9
    lo, hi = margin_interval([math.log(1.01)] * 4)
    assert lo < 1.0 < hi


def test_clearly_slower_needs_separation_beyond_noise():
    assert clearly_slower([0.90, 0.91, 0.89, 0.90], tolerance=0.01)
    assert not clearly_slower([0.99, 1.01, 1.0, 0.98], tolerance=0.01)
    assert not clearly_slower([0.9], tolerance=0.01)  # one round is never enough


# -- the record and the renderers ------------------------------------------------------------------


def test_the_tuner_record_says_tie_and_the_renderers_print_the_tie_sentence():
    from tune_costmodel import CPU_BOUND
    from tune_simulated import SimulatedEvaluator

    from stallscope.tuning.search import Search
    from stallscope.tuning.space import MB, MemoryBudget, SearchSettings, SearchSpace

    # A flat plateau: every worker count from 2 up is equally fast, so the race ties them.
    def rate(config: LoaderConfig) -> float:
        return 400.0 if config.num_workers >= 2 else 150.0 * (1 + config.num_workers)

    profile = CPU_BOUND.profile()
    space = SearchSpace(cores=2, batch_size=CPU_BOUND.batch_size, max_workers=16)
    result = Search(
        SimulatedEvaluator(rate, noise=0.01, seed=3),
        space,
        profile,
        baseline=LoaderConfig(batch_size=CPU_BOUND.batch_size),
        memory=MemoryBudget(budget_bytes=16_000 * MB, batch_bytes=profile.batch_bytes),
        settings=SearchSettings(budget_s=60.0, seed=3),
    ).run()
    assert result.tie and result.pick.num_workers == 2
    data = result.to_dict()
    assert data["tie"] is True and data["tie_margin"] == MARGIN

    record = json.loads(
        (
            __import__("pathlib").Path(__file__).resolve().parents[1]
            / "fixtures"
            / "record_tune.json"
        ).read_text()
    )
    record["best"].update(tie=True, tie_margin=0.03, rounds=5, confidence=0.62, confirmed=True)
    jsonschema.validate(record, record_schema())
    # The tune command's console: the verdict (how sure, the tie), then the tuner's evidence.
    console = " ".join(ConsoleRenderer(width=200).render(record).split())
    assert "A tie within noise; the cheaper config was kept" in console
    assert "more than 3% faster" in console
    assert "within the noise, so the cheaper config was kept" in console
    md = MarkdownRenderer().render(record)
    assert "A tie within noise; the cheaper config was kept" in md
    assert "A tie within noise; the cheaper config was kept" in HTMLRenderer(plots=False).render(
        record
    )
    record["best"]["tie"] = False
    assert "tie within noise" not in MarkdownRenderer().render(record)


def test_a_far_behind_rival_stays_in_the_race_until_the_pick_can_be_sure():
    from tune_simulated import SimulatedEvaluator, unbounded_race

    from stallscope.tuning.race import Entrant
    from stallscope.tuning.space import SearchSettings, confirm_window

    fast, slow = _cfg(4), _cfg(0)
    ev = SimulatedEvaluator(lambda c: 1000.0 if c.num_workers else 100.0, noise=0.03, seed=1)
    race = unbounded_race(ev)
    decision = race.run([Entrant(fast, "tuner", 1000.0), Entrant(slow, "baseline", 100.0)])
    # 10x behind after one round, yet it races on: a confidence needs a rival in the rounds.
    assert race.rounds == CONFIDENT_ROUNDS
    assert decision.pick == fast and decision.confidence >= 0.95
    # Single-process configs race with longer windows (every preemption stops their loading).
    assert (
        confirm_window(slow, SearchSettings())
        == 1.0
        > confirm_window(fast, SearchSettings())
        == 0.75
    )


@pytest.mark.parametrize(
    ("baseline_rate", "left_out"),
    [
        (570.0, 4),  # close to the leader: it may be the verdict, the slowest finalist goes
        (300.0, 0),  # far behind: it raced for the gain's interval only, and goes first
    ],
)
def test_the_race_leaves_out_the_slowest_so_that_two_rounds_fit_the_budget(baseline_rate, left_out):
    from tune_simulated import SimulatedEvaluator

    from stallscope.tuning.race import Entrant, Race
    from stallscope.tuning.space import SearchSettings

    rates = {0: baseline_rate, 2: 600.0, 4: 590.0, 8: 580.0}
    ev = SimulatedEvaluator(lambda c: rates[c.num_workers], noise=0.01, seed=2)
    spent: list[float] = []
    skipped: list[tuple[int, str]] = []
    per_config = 1.0  # seconds a config costs in one round
    budget = 6.5  # two rounds of three configs fit (6 s); two rounds of four do not (8 s)

    def affordable(seconds: float) -> bool:
        return sum(spent) + seconds <= budget

    def record(trial) -> None:
        spent.append(per_config / 2)  # a round measures each config twice (A B B A)

    race = Race(
        ev,
        SearchSettings(),
        round_cost=lambda configs: per_config * len(configs),
        affordable=affordable,
        record=record,
        note=lambda text: None,
        skip=lambda config, why: skipped.append((config.num_workers, why)),
    )
    decision = race.run(
        [
            Entrant(_cfg(2), "tuner", 600.0),
            Entrant(_cfg(4), "other", 590.0),
            Entrant(_cfg(8), "sweep-best", 580.0, seeded=True),
            Entrant(_cfg(0), "baseline", baseline_rate),
        ]
    )
    # One entrant that is neither the leader nor a seed goes before round 1: the pick then races
    # the two rounds against its rivals that a confidence needs.
    before_round_1 = [w for w, why in skipped if "2 round(s) of 4 configs" in why]
    assert before_round_1 == [left_out]
    assert race.rounds == 2 and race.log.rounds_of(_cfg(8)) == 2
    assert decision.pick == _cfg(2) and decision.confidence is not None


def test_a_users_config_far_behind_races_two_rounds_before_it_leaves():
    from tune_simulated import SimulatedEvaluator, unbounded_race

    from stallscope.tuning.race import Entrant

    rates = {0: 200.0, 2: 600.0, 4: 400.0}
    race = unbounded_race(SimulatedEvaluator(lambda c: rates[c.num_workers], noise=0.01, seed=3))
    race.run(
        [
            Entrant(_cfg(2), "tuner", 600.0),
            Entrant(_cfg(4), "other", 400.0),
            Entrant(_cfg(0), "baseline", 200.0),
        ]
    )
    # Both far behind the leader: the other config leaves after round 1 (FAR_BEHIND), the user's
    # stays for the two rounds an interval of the gain needs.
    assert race.log.rounds_of(_cfg(4)) == 1
    assert race.log.rounds_of(_cfg(0)) >= 2


def test_with_room_for_one_round_only_the_race_still_runs_it():
    from tune_simulated import SimulatedEvaluator

    from stallscope.tuning.race import Entrant, Race
    from stallscope.tuning.space import SearchSettings

    ev = SimulatedEvaluator(lambda c: 100.0 * (1 + c.num_workers), noise=0.01, seed=3)
    spent: list[float] = []
    race = Race(
        ev,
        SearchSettings(),
        round_cost=lambda configs: float(len(configs)),
        affordable=lambda seconds: sum(spent) + seconds <= 2.5,
        record=lambda trial: spent.append(0.5),
        note=lambda text: None,
        skip=lambda config, why: None,
    )
    decision = race.run([Entrant(_cfg(2), "tuner", 300.0), Entrant(_cfg(0), "baseline", 100.0)])
    assert race.rounds == 1 and decision is not None and decision.confidence is None
