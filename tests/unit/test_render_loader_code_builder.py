"""The one snippet builder: the user's call kept, objects by import or placeholder, knobs marked."""

from __future__ import annotations

import numpy as np
import pytest
import real_audio
import real_translation
import torch
from torch.utils.data import DataLoader, Dataset

from stallscope.config import LoaderConfig
from stallscope.pipeline.arguments import LoaderCall, describe_loader, placeholder, reference
from stallscope.render.loader_code import render_diff, render_python, render_yaml
from stallscope.render.loader_snippet import build_snippet, seeding_missing, snippet_for_record
from stallscope.target import load_target


class Squares(Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> int:
        return i * i


class WithRng(Squares):
    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)


def detection():
    """The detection pipeline, imported when a test needs it: it loads OpenCV, whose threads
    other tests' oversubscription checks would otherwise see in this process."""
    import real_detection

    return real_detection


def my_init(worker_id: int) -> None:
    """A worker_init_fn importable from this test module."""


SHARED_COLLATE = real_translation.Collater()  # a module-level instance: referable by name


def _kwargs(snippet) -> dict[str, str]:
    return {name: source for name, source in snippet.arguments if name is not None}


def test_functions_are_imported_by_module_and_name_instances_are_placeholders():
    assert reference("collate_fn", detection().collate_fn).imports == [
        "from real_detection import collate_fn"
    ]
    arg = reference("collate_fn", real_translation.Collater())
    assert arg.placeholder and arg.source == "<your collate_fn: real_translation.Collater instance>"
    lam = reference("collate_fn", lambda batch: batch)
    assert lam.placeholder and lam.source.count("<") == 1 and lam.source.endswith(">")
    assert (
        placeholder("generator", torch.Generator()) == "<your generator: torch.Generator instance>"
    )
    assert reference("timeout", 5.0).source == "5.0"


def test_a_module_level_instance_is_referred_to_by_its_global_name():
    arg = reference("collate_fn", SHARED_COLLATE, modules=[__name__])
    assert arg.source == "SHARED_COLLATE" and arg.imports == [
        f"from {__name__} import SHARED_COLLATE"
    ]


def test_bound_method_of_the_dataset_is_written_on_the_dataset():
    dataset = Squares()
    arg = reference("collate_fn", dataset.__getitem__, dataset=dataset, dataset_source="train_set")
    assert arg.source == "train_set.__getitem__"


def test_describe_keeps_every_argument_the_user_set():
    gen = torch.Generator().manual_seed(3)
    loader = DataLoader(
        Squares(),
        batch_size=4,
        shuffle=True,
        drop_last=True,
        collate_fn=detection().collate_fn,
        worker_init_fn=my_init,
        generator=gen,
        timeout=7.0,
    )
    call = describe_loader(loader)
    names = [a.name for a in call.arguments]
    assert names == [
        "dataset",
        "batch_size",
        "shuffle",
        "drop_last",
        "collate_fn",
        "worker_init_fn",
        "generator",
        "timeout",
    ]
    assert call.argument("worker_init_fn").source == "my_init"
    assert LoaderCall.from_dict(call.to_dict()) == call  # survives the JSON record


def test_describe_a_batch_sampler_loader_has_no_batch_size_and_reports_its_sizes():
    loader = real_translation.make_loader(num_workers=0)
    call = describe_loader(loader)
    assert call.batching == "batch_sampler" and call.argument("batch_size") is None
    assert call.argument("batch_sampler").source.startswith(
        "<your batch_sampler: real_translation.TokenBuckets"
    )
    sizes = call.batch_sizes
    assert sizes["batches"] == len(loader.batch_sampler.batches) and sizes["min"] < sizes["max"]


def test_python_keeps_the_users_arguments_and_marks_changed_knobs():
    pipeline = load_target(real_audio.make_loader)
    pick = pipeline.baseline.replace(num_workers=4, prefetch_factor=3)
    snippet = build_snippet(pick, call=pipeline.call, baseline=pipeline.baseline, own_api=False)
    kwargs = _kwargs(snippet)
    assert (
        kwargs["batch_size"] == "6"
        and kwargs["shuffle"] == "True"
        and kwargs["drop_last"] == "True"
    )
    # An object that cannot be imported is read from what the user's factory returns (runnable as
    # printed).
    assert kwargs["collate_fn"] == "yours.collate_fn" and "yours = make_loader()" in snippet.prelude
    assert "from real_audio import make_loader" in snippet.imports
    assert snippet.changed == ["num_workers", "prefetch_factor"]
    code = render_python(snippet)
    assert "    num_workers=4,  # was 2\n" in code and "    prefetch_factor=3,  # new\n" in code
    assert "worker_init_fn" not in code  # no RNG object in the dataset: seeding is not missing


def test_diff_lists_only_the_changed_keyword_arguments():
    pipeline = load_target(real_audio.make_loader)
    snippet = build_snippet(
        pipeline.baseline.replace(num_workers=4), call=pipeline.call, baseline=pipeline.baseline
    )
    lines = [line for line in render_diff(snippet).splitlines() if line[:1] in "+-"]
    assert lines == ["-    num_workers=2,", "+    num_workers=4,"]
    unchanged = build_snippet(pipeline.baseline, call=pipeline.call, baseline=pipeline.baseline)
    assert "nothing to change" in render_diff(unchanged)


def test_keeping_yours_is_your_factory_call_not_a_loader_rebuilt_from_its_parts():
    pipeline = load_target(real_audio.make_loader)
    kept = build_snippet(pipeline.baseline, call=pipeline.call, baseline=pipeline.baseline)
    assert render_python(kept) == "from real_audio import make_loader\n\nloader = make_loader()\n"
    assert kept.changes == [] and "nothing to change" in render_diff(kept)
    # Where workers would share random streams the call gains seeding: a change, so a rebuild.
    seeded = build_snippet(
        pipeline.baseline, call=pipeline.call, baseline=pipeline.baseline, seeding_missing=True
    )
    assert "yours = make_loader()" in seeded.prelude and "worker_init_fn" in _kwargs(seeded)


def test_keeping_yours_from_a_factory_of_parts_is_the_loader_built_from_them():
    # A target that returns a dict or a Dataset: calling it gives no loader (iterating the dict
    # gave its keys, "its batches look like str", on a machine where tune kept yours), so the
    # code is the DataLoader call over the parts, as before.
    import tune_pipelines

    for target in (tune_pipelines.tensors, tune_pipelines.waiting):
        pipeline = load_target(target)
        assert not pipeline.call.origin_is_loader
        kept = render_python(
            build_snippet(pipeline.baseline, call=pipeline.call, baseline=pipeline.baseline)
        )
        assert f"yours = {target.__name__}()" in kept and "loader = DataLoader(" in kept
    assert load_target(real_audio.make_loader).call.origin_is_loader


def test_diff_removes_worker_only_knobs_when_going_to_zero_workers():
    base = LoaderConfig(num_workers=2, batch_size=8, prefetch_factor=4, persistent_workers=True)
    snippet = build_snippet(LoaderConfig(batch_size=8), baseline=base)
    text = render_diff(snippet)
    assert "-    prefetch_factor=4," in text and "-    persistent_workers=True," in text
    assert "+    num_workers=0," in text and "+    prefetch_factor" not in text


def test_the_users_worker_init_fn_is_kept_and_chained_only_where_seeding_is_missing():
    pipeline = load_target(detection().make_loader)
    pick = pipeline.baseline.replace(num_workers=3)
    kept = build_snippet(pick, call=pipeline.call, baseline=pipeline.baseline, own_api=False)
    assert _kwargs(kept)["worker_init_fn"] == "seed_worker" and "worker_init_fn" not in kept.changed
    chained = build_snippet(
        pick, call=pipeline.call, baseline=pipeline.baseline, seeding_missing=True, own_api=False
    )
    assert _kwargs(chained)["worker_init_fn"] == "ss.chain_worker_init(seed_worker, ss.seed_worker)"
    assert "import stallscope as ss" in chained.imports
    record = {
        "best": {"config": pick.to_dict()},
        "baseline": {"config": pipeline.baseline.to_dict()},
        "loader": pipeline.call.to_dict(),
        "findings": [{"code": "duplicate-rng"}],
    }
    assert snippet_for_record(record).arguments == chained.arguments


def test_seeding_is_added_where_the_dataset_holds_an_rng_and_the_user_has_no_init():
    call = describe_loader(DataLoader(WithRng(), batch_size=4))
    assert call.rng_attributes == ["dataset.rng"] and seeding_missing(call, set()) is True
    snippet = build_snippet(
        LoaderConfig(num_workers=2, batch_size=4), call=call, seeding_missing=True
    )
    assert _kwargs(snippet)["worker_init_fn"] == "ss.seed_worker"
    assert seeding_missing(describe_loader(DataLoader(Squares(), batch_size=4)), set()) is None


def test_worker_threads_render_as_a_threaded_dataset_line_that_runs():
    pipeline = load_target(real_audio.make_loader)
    pick = pipeline.baseline.replace(num_workers=0, worker_threads=4)
    snippet = build_snippet(pick, call=pipeline.call, baseline=pipeline.baseline)
    code = render_python(snippet)
    assert "dataset = ss.threaded_dataset(yours.dataset, threads=4)\n" in code
    assert "\n    dataset,\n" in code and "import stallscope as ss" in code
    assert "+dataset = ss.threaded_dataset(" in render_diff(snippet)
    user = real_audio.make_loader(num_workers=0)
    namespace: dict = {}
    exec(code, namespace)  # as printed: the user's objects come from their own factory
    torch.manual_seed(0)
    got = next(iter(namespace["loader"]))
    torch.manual_seed(0)
    want = next(iter(user))
    assert all(
        torch.equal(a, b) for a, b in zip(got, want)
    )  # threads fetch the same items, same batch


def test_batch_size_changes_only_when_the_pick_asks_for_it():
    pipeline = load_target(real_audio.make_loader)
    same = build_snippet(
        pipeline.baseline.replace(num_workers=1),
        call=pipeline.call,
        baseline=pipeline.baseline,
        own_api=False,
    )
    assert "batch_size" not in same.changed and _kwargs(same)["batch_size"] == "6"
    bigger = build_snippet(
        pipeline.baseline.replace(batch_size=12),
        call=pipeline.call,
        baseline=pipeline.baseline,
        own_api=False,
    )
    assert ("batch_size", "6", "12") in [(c.name, c.before, c.after) for c in bigger.changes]


def test_subclass_is_called_by_its_own_name_and_import():
    pipeline = load_target(detection().make_loader)
    pick = pipeline.baseline.replace(num_workers=pipeline.baseline.num_workers + 1)
    snippet = build_snippet(pick, call=pipeline.call, baseline=pipeline.baseline, own_api=False)
    assert snippet.callable == "InfiniteDataLoader"
    line = next(i for i in snippet.imports if i.startswith("from real_detection import "))
    assert {"InfiniteDataLoader", "collate_fn", "seed_worker"} <= set(
        line.split(" import ")[1].split(", ")
    )


@pytest.mark.parametrize("batched", [False, True])
def test_yaml_reads_back_as_the_config_and_names_what_it_keeps(batched):
    pipeline = load_target(real_audio.make_loader)
    pick = pipeline.baseline.replace(num_workers=3, batched_fetch=batched)
    text = render_yaml(
        build_snippet(pick, call=pipeline.call, baseline=pipeline.baseline, own_api=False),
        pick,
        comment="tuned",
    )
    assert LoaderConfig.from_yaml(text) == pick
    assert "keeps:" in text and "collate_fn:" in text and "drop_last:" in text


def test_batched_fetch_goes_through_make_loader_with_the_users_arguments():
    pipeline = load_target(real_audio.make_loader)
    pick = pipeline.baseline.replace(batched_fetch=True, num_workers=0)
    snippet = build_snippet(pick, call=pipeline.call, baseline=pipeline.baseline)
    kwargs = _kwargs(snippet)
    assert snippet.callable == "ss.make_loader" and "config" in kwargs
    assert {"shuffle", "drop_last", "collate_fn"} <= set(kwargs) and "batch_size" not in kwargs
