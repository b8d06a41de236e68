"""Emitters: YAML round trip, and Python that really builds the DataLoader."""

from __future__ import annotations

import ast

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from stallscope.config import LoaderConfig, loader_supports
from stallscope.loader_call import Argument
from stallscope.render.loader_code import render_python, to_yaml
from stallscope.render.loader_snippet import build_snippet, default_call

CONFIGS = [
    LoaderConfig(batch_size=32),
    LoaderConfig(
        num_workers=8, batch_size=16, prefetch_factor=4, persistent_workers=True, in_order=False
    ),
    LoaderConfig(num_workers=2, batch_size=64, multiprocessing_context="spawn", torch_threads=1),
    LoaderConfig(batch_size=128, batched_fetch=True),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label())
def test_yaml_round_trip(config, tmp_path):
    text = to_yaml(config, comment="tuned: 1,234 samples/s\nconfidence 97%")
    assert text.startswith("# tuned: 1,234 samples/s\n# confidence 97%\n")
    assert LoaderConfig.from_yaml(text) == config
    path = tmp_path / "loader.yaml"
    path.write_text(text)
    assert LoaderConfig.load(path) == config


def _call(config: LoaderConfig, *, dataset: str = "dataset", **arguments: str):
    """A user's ``DataLoader(dataset, batch_size=N, ...)`` call with ``arguments`` as written."""
    call = default_call(config.batch_size, dataset=dataset)
    call.arguments += [Argument(name, source) for name, source in arguments.items()]
    return call


def _run(code: str, dataset) -> DataLoader:
    ast.parse(code)  # valid Python
    namespace = {"dataset": dataset, "collate_fn": None}
    exec(compile(code, "<emitted>", "exec"), namespace)
    return namespace["loader"]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("config", CONFIGS[:3], ids=lambda c: c.label())
def test_python_emitter_builds_the_dataloader(config):
    dataset = TensorDataset(torch.arange(256.0))
    before = torch.get_num_threads()
    try:
        code = render_python(build_snippet(config), comment="from stallscope tune")
        loader = _run(code, dataset)
    finally:
        torch.set_num_threads(before)
    assert isinstance(loader, DataLoader)
    assert loader.batch_size == config.batch_size
    assert loader.num_workers == config.num_workers
    if config.num_workers:
        assert loader.prefetch_factor == config.prefetch_factor
        assert loader.persistent_workers == config.persistent_workers
        assert loader.worker_init_fn is None  # seeding is not missing here: nothing added
        if loader_supports("in_order"):
            assert loader.in_order == config.in_order
        if config.multiprocessing_context:
            assert (
                loader.multiprocessing_context.get_start_method() == config.multiprocessing_context
            )


def test_python_emitter_for_batched_fetch_uses_make_loader_and_yields_batches():
    config = CONFIGS[3]
    call = _call(config, shuffle="True", drop_last="True")
    code = render_python(build_snippet(config, call=call))
    assert "ss.make_loader(" in code
    loader = _run(code, TensorDataset(torch.arange(1000.0)))
    batches = list(loader)
    assert len(batches) == 1000 // 128
    assert all(b[0].shape == (128,) for b in batches)
    assert sorted(torch.cat([b[0] for b in batches]).tolist()) != list(range(896))  # shuffled


def test_python_emitter_names_the_collate_and_shuffle():
    config = LoaderConfig(num_workers=2, batch_size=8)
    call = _call(config, dataset="train_set", shuffle="True", collate_fn="collate_fn")
    code = render_python(build_snippet(config, call=call))
    assert "    train_set,\n" in code and "shuffle=True" in code and "collate_fn=collate_fn" in code
