"""The version a user sees (``stallscope --version``, every record's ``tool_version``) is
the release's.

pyproject.toml names where the version lives; this test resolves it from there the way a build
does, so a release bump in one place reaches every report, and a stale copy fails here.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _pyproject_version() -> str:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = data["project"]
    if "version" in project:
        return project["version"]
    assert "version" in project.get("dynamic", []), "pyproject.toml gives no version"
    attr = data["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = attr.rpartition(".")
    path = ROOT / "src" / Path(*module.split("."))
    source = (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text(
        encoding="utf-8"
    )
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{attr} is not assigned a literal")


def test_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", _pyproject_version())


def test_cli_prints_the_pyproject_version():
    done = subprocess.run(
        [sys.executable, "-m", "stallscope", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"stallscope {_pyproject_version()}"


def test_every_record_carries_the_pyproject_version():
    import stallscope
    from stallscope.record import RunRecord

    version = _pyproject_version()
    assert stallscope.__version__ == version
    record = RunRecord(command="bench", target="t.py:f", host={})
    assert record.to_dict()["tool_version"] == version
