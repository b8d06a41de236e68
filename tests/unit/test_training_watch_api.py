"""``ss.watch``'s signature: every option explicit, typed and documented; the same as
``Watch``'s."""

from __future__ import annotations

import inspect

import stallscope as ss
from stallscope.api import Watch
from stallscope.training import gather, profile_section

OPTIONS = [
    "log_every",
    "sync",
    "sample_resources",
    "jsonl",
    "csv",
    "tensorboard",
    "name",
    "warmup",
    "log",
    "sample_interval",
    "resource_interval",
    "gpu",
    "clock",
    "window_s",
    "windows_jsonl",
    "batch_size",
]


def test_watch_has_an_explicit_signature():
    parameters = inspect.signature(ss.watch).parameters
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    assert all(p.kind is not inspect.Parameter.VAR_POSITIONAL for p in parameters.values())
    assert list(parameters) == ["loader", *OPTIONS]
    for name in OPTIONS:
        p = parameters[name]
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, name
        assert p.default is not inspect.Parameter.empty, name
        assert p.annotation is not inspect.Parameter.empty, name


def test_every_option_is_documented():
    doc = inspect.getdoc(ss.watch)
    for name in OPTIONS:
        assert f"\n    {name}: " in doc, name


def test_watch_and_watch_init_take_the_same_options_with_the_same_defaults():
    func = inspect.signature(ss.watch).parameters
    init = inspect.signature(Watch.__init__).parameters
    assert "self" in init and all(
        p.kind is not inspect.Parameter.VAR_KEYWORD for p in init.values()
    )
    assert [(n, p.kind, p.default, p.annotation) for n, p in func.items()] == [
        (n, p.kind, p.default, p.annotation) for n, p in init.items() if n != "self"
    ]


def test_every_option_reaches_the_watch(tmp_path):
    def clock() -> float:
        return 1.0

    w = ss.watch(
        [1, 2],
        name="val",
        warmup=3,
        sample_resources=False,
        sample_interval=0.3,
        resource_interval=0.4,
        window_s=10.0,
        clock=clock,
        batch_size=8,
        gpu=False,
        log_every=5,
        log=lambda line: None,
        jsonl=tmp_path / "s.jsonl",
        csv=tmp_path / "s.csv",
        windows_jsonl=tmp_path / "w.jsonl",
    )
    assert (w.name, w.warmup, w.sample_resources, w.sample_interval, w.window_s) == (
        "val",
        3,
        False,
        0.3,
        10.0,
    )
    assert (
        w.resource_interval == 0.4
        and w._clock is clock
        and w._batch_size == 8
        and w._gpu_spec is False
    )
    assert len(w._sinks.sinks) == 4  # the live line, the windows file, the JSONL and CSV rows
    w.close()


def test_profile_section_and_gather_are_modules_of_their_own():
    assert profile_section.profile_section.__module__ == "stallscope.training.profile_section"
    assert gather.exchange.__module__ == "stallscope.training.gather"
    public = {
        n
        for cls in Watch.__mro__  # the probe and its readings (windows, step rows) are base classes
        for n, v in vars(cls).items()
        if not n.startswith("_") and callable(getattr(v, "__get__", None))
    }
    assert {
        "to_dict",
        "gather",
        "summary",
        "recommendations",
        "advice",
        "next",
        "timed",
        "data",
        "data_start",
        "data_end",
        "pause",
        "epoch_start",
        "end_step",
        "cancel_wait",
        "close",
        "observe",
        "step_rows",
        "window",
    } <= public
