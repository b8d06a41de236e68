"""The console every command prints to."""

from __future__ import annotations

import io

import pytest

from stallscope.commands import _common


@pytest.mark.parametrize(
    ("columns", "width"), [(None, 140), ("80", 80), ("200", 200), ("wide", 140), ("10", 140)]
)
def test_piped_output_takes_its_width_from_columns(monkeypatch, columns, width):
    monkeypatch.setattr(_common.sys, "stdout", io.StringIO())
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert _common.piped_width() == width
