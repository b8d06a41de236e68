"""Resolving ``module:fn`` targets: a module in the working folder is found when a console script
(which, unlike ``python -m``, does not put that folder on ``sys.path``) runs beside it."""

from __future__ import annotations

import sys

import pytest

from stallscope.errors import UsageError
from stallscope.pipeline.resolve import resolve_callable

MODULE = "def make_loader(num_workers=0):\n    return num_workers\n"


@pytest.fixture
def console_script_path(monkeypatch, tmp_path):
    """A working folder ``sys.path`` does not reach, as under the ``stallscope`` script."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    return tmp_path


def test_a_module_beside_the_command_is_found(console_script_path):
    (console_script_path / "ss_beside_a.py").write_text(MODULE)
    try:
        assert resolve_callable("ss_beside_a:make_loader")(num_workers=3) == 3
        # appended: what was installed keeps its place ahead of it
        assert sys.path[-1] == str(console_script_path)
    finally:
        sys.modules.pop("ss_beside_a", None)


def test_a_package_beside_the_command_is_found(console_script_path):
    package = console_script_path / "ss_beside_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "loaders.py").write_text(MODULE)
    try:
        assert resolve_callable("ss_beside_pkg.loaders:make_loader")() == 0
    finally:
        for name in ("ss_beside_pkg", "ss_beside_pkg.loaders"):
            sys.modules.pop(name, None)


def test_a_module_found_nowhere_is_one_sentence(console_script_path):
    with pytest.raises(UsageError, match="module 'ss_nowhere' cannot be imported"):
        resolve_callable("ss_nowhere:make_loader")
    assert str(console_script_path) not in sys.path  # nothing beside the command: path untouched


def test_a_missing_import_inside_the_module_is_not_retried(console_script_path):
    (console_script_path / "ss_beside_b.py").write_text("import ss_not_installed_xyz\n" + MODULE)
    with pytest.raises(UsageError, match="No module named 'ss_not_installed_xyz'"):
        resolve_callable("ss_beside_b:make_loader")
    sys.modules.pop("ss_beside_b", None)
