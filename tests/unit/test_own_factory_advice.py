"""A factory that takes knobs and returns a plain DataLoader (NOTE [a DataLoader's factory]): the
advice calls it, sets on what it returns only what it does not take, and is checked against what
it builds before it is printed; the tuner keeps to what such a call can set."""

from __future__ import annotations

import own_factory
import pytest
from verified_advice import verified_advice

from stallscope.render.loader_code import render_diff, render_python
from stallscope.render.loader_snippet import build_snippet
from stallscope.target import load_target
from stallscope.tuning.space import SearchSpace
from stallscope.tuning.tuner import limit_to_factory


def _advice(factory, **knobs):
    """The verified advice for a pick that changes ``knobs`` of the factory's own settings."""
    assert load_target(factory).kind.name == "dataloader"
    return verified_advice(factory, **knobs)


def _built(code: str):
    namespace: dict = {}
    exec(compile(code, "<advice>", "exec"), namespace)
    return namespace["loader"]


def test_the_advice_is_a_call_to_the_users_factory_with_the_knob_it_takes():
    advice = _advice(own_factory.make_loader, num_workers=2)
    assert advice["verified"], advice.get("reason")
    assert advice["form"] == "factory"
    assert "loader = make_loader(\n    num_workers=2,  # was 0\n)" in advice["python"]
    assert "DataLoader(" not in advice["python"] and "prefetch_factor" not in advice["python"]
    loader = _built(advice["python"])
    assert loader.num_workers == 2 and loader.batch_size == 8


def test_a_knob_the_factory_does_not_take_is_set_on_the_loader_it_returns():
    advice = _advice(own_factory.make_loader, num_workers=2, prefetch_factor=4)
    assert advice["verified"], advice.get("reason")
    code = advice["python"]
    assert "yours = make_loader(num_workers=2)" in code
    assert "yours.prefetch_factor = 4  # was None" in code and "yours.num_workers" not in code
    loader = _built(code)
    assert (loader.num_workers, loader.prefetch_factor) == (2, 4)


def test_a_factory_that_builds_other_knobs_from_num_workers_gets_the_dataloader_call():
    # Its call would also turn persistent_workers on, which the trial did not: the DataLoader
    # call with the trial's knobs is written, and says why.
    advice = _advice(own_factory.derived_loader, num_workers=2)
    assert advice["verified"], advice.get("reason")
    code = advice["python"]
    assert "DataLoader(" in code and "num_workers=2" in code
    assert "the call to derived_loader() was tried first" in code
    assert "persistent_workers=False (it has True)" in code
    assert not _built(code).persistent_workers


@pytest.mark.parametrize("persistent", [True, False])
def test_no_workers_is_advised_as_the_factory_called_with_num_workers_0(persistent):
    # The factory's loader has persistent workers; at num_workers=0 persistent_workers (and
    # prefetch_factor) mean nothing, and the factory sets them for no workers itself: the advice
    # is still its own call, whether the pick kept the flag or cleared it.
    advice = _advice(own_factory.workers_loader, num_workers=0, persistent_workers=persistent)
    assert advice["verified"], advice.get("reason")
    assert advice["form"] == "factory"
    assert "loader = workers_loader(\n    num_workers=0,  # was 2\n)" in advice["python"]
    assert "DataLoader(" not in advice["python"] and "persistent" not in advice["python"]
    loader = _built(advice["python"])
    assert loader.num_workers == 0 and not loader.persistent_workers


def test_a_factory_that_drops_the_knob_is_not_what_the_advice_calls():
    advice = _advice(own_factory.ignoring_loader, num_workers=2)
    assert advice["verified"], advice.get("reason")
    assert "does not take num_workers=2" in advice["python"]
    assert _built(advice["python"]).num_workers == 2


def test_the_dataloader_call_is_kept_where_workers_need_seeding_or_it_is_asked_for():
    pipeline = load_target(own_factory.make_loader)
    pick = pipeline.baseline.replace(num_workers=2)
    call, base = pipeline.call, pipeline.baseline
    assert build_snippet(pick, call=call, baseline=base).form == "factory"
    assert build_snippet(pick, call=call, baseline=base, seeding_missing=True).form == "call"
    assert build_snippet(pick, call=call, baseline=base, own_api=False).form == "call"
    # persistent_workers cannot be set once a DataLoader is built, and the factory does not take it
    persistent = pick.replace(persistent_workers=True)
    assert build_snippet(persistent, call=call, baseline=base).form == "call"


def test_the_diff_names_the_factorys_argument_and_the_attribute_apart():
    pipeline = load_target(own_factory.make_loader)
    pick = pipeline.baseline.replace(num_workers=2, prefetch_factor=4)
    snippet = build_snippet(pick, call=pipeline.call, baseline=pipeline.baseline)
    diff = render_diff(snippet)
    assert "+    num_workers=2,  # was 0" in diff and "+loader.prefetch_factor = 4" in diff
    assert "+loader.num_workers" not in diff
    assert render_python(snippet).count("make_loader(") == 1


@pytest.mark.parametrize("takes_persistent", [False, True])
def test_the_tuner_keeps_to_what_a_call_of_the_factory_can_set(takes_persistent):
    pipeline = load_target(own_factory.make_loader)
    call = pipeline.call
    if takes_persistent:
        call.factory_parameters["persistent_workers"] = "persistent_workers"
    space = SearchSpace(
        cores=2, batch_size=8, max_workers=8, batched_fetch=True, worker_threads=(2, 4)
    )
    note = limit_to_factory(space, call)
    assert not space.batched_fetch and space.worker_threads == ()
    assert space.prefetch_factors and space.in_order  # a DataLoader takes them once built
    assert space.persistent_workers  # still measured
    assert space.persistent_in_pick is takes_persistent and space.can_persist is takes_persistent
    assert "make_loader()" in note and ("advised apart" in note) is not takes_persistent


def test_code_that_sets_in_order_false_says_what_it_does_besides_the_rate():
    # A factory's own call with the attribute set after it, and a DataLoader call: both say it.
    from stallscope.render.loader_snippet import ORDER_NOTE

    pipeline = load_target(own_factory.make_loader)
    pick = pipeline.baseline.replace(num_workers=2, in_order=False)
    snippet = build_snippet(pick, call=pipeline.call, baseline=pipeline.baseline)
    assert "in_order" in snippet.changed
    code = render_python(snippet)
    assert f"# note: {ORDER_NOTE}" in code and "in_order = False" in code
    plain = build_snippet(
        pick.replace(in_order=True), call=pipeline.call, baseline=pipeline.baseline
    )
    assert ORDER_NOTE not in render_python(plain)
    rebuilt = build_snippet(pick, baseline=pipeline.baseline)
    assert "in_order=False" in render_python(rebuilt) and ORDER_NOTE in rebuilt.notes
