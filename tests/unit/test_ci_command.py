"""CI runs exactly the README's test command, so what the README promises is what CI checks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _test_command(text: str) -> list[str]:
    return [
        line.strip()
        for line in text.splitlines()
        if re.search(r"pip install .* && python -m pytest", line)
    ]


def test_ci_runs_the_readme_test_command_verbatim():
    readme = _test_command((ROOT / "README.md").read_text(encoding="utf-8"))
    ci = _test_command((ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    assert len(readme) == 1 and ci == readme
    # torch pinned in the same pip command (no CUDA downloads), and the real frameworks installed.
    assert "torch==2.13.0" in readme[0]
    for extra in ("test", "lightning", "hf", "tensorboard"):
        assert re.search(rf"[\[,]{extra}[\],]", readme[0]), extra
    # The code is checked as the tests are: lint, format and types before pytest.
    checks = readme[0].split(" && ")
    assert checks[-4:] == [
        "ruff check .",
        "ruff format --check .",
        "mypy",
        "python -m pytest",
    ]
