"""The library surface of SPEC §2.3 stays callable however the package is imported."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import stallscope as ss
from stallscope.cli import COMMANDS

PUBLIC_CALLABLES = [
    "bench",
    "tune",
    "check",
    "stages",
    "stage",
    "watch",
    "make_loader",
    "seed_worker",
    "load_target",
]


@pytest.mark.parametrize("name", PUBLIC_CALLABLES)
def test_public_names_are_functions_not_modules(name):
    # Importing every submodule first must not replace ss.<name> with a module.
    for info in pkgutil.walk_packages(ss.__path__, "stallscope."):
        if ".integrations." not in info.name:  # optional frameworks
            importlib.import_module(info.name)
    obj = getattr(ss, name)
    assert callable(obj) and not isinstance(obj, type(ss)), f"ss.{name} is {obj!r}"


def test_loader_config_round_trips():
    cfg = ss.LoaderConfig(num_workers=4, batch_size=64, prefetch_factor=4, persistent_workers=True)
    assert ss.LoaderConfig.from_dict(cfg.to_dict()) == cfg
    assert ss.LoaderConfig.from_yaml(cfg.to_yaml()) == cfg
    kwargs = cfg.to_kwargs()
    assert (
        kwargs["num_workers"] == 4
        and kwargs["prefetch_factor"] == 4
        and kwargs["persistent_workers"]
    )
    # Knobs that need workers are dropped at num_workers=0, so torch accepts the kwargs.
    assert "prefetch_factor" not in ss.LoaderConfig(num_workers=0, batch_size=8).to_kwargs()


def test_help_is_fast_to_import():
    # `stallscope --help` must not import torch.
    code = (
        "import sys, stallscope.cli; stallscope.cli.main(['--help']); print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().endswith("False")


def test_every_command_answers_help_without_importing_torch():
    # Each command's options (and a usage error found before its target loads) come back in about
    # a second: the probes, and torch with them, are imported when the command runs.
    code = (
        "import contextlib, io, sys, stallscope.cli\n"
        "for name in stallscope.cli.COMMANDS:\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "        stallscope.cli.main([name, '--help'])\n"
        "    print(name, 'torch' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = done.stderr.split("\n")
    assert [line.split()[0] for line in lines if line] == list(COMMANDS)
    assert [line for line in lines if line.endswith("True")] == []
