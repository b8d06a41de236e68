"""Each shared threshold has one home, ``stallscope/thresholds.py``: its numbers are written nowhere
else in the package, nothing else defines its names, and each carries its reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from stallscope import thresholds

PACKAGE = Path(thresholds.__file__).resolve().parent
HOME = Path(thresholds.__file__).resolve()

# Literals that, written in code, restate a threshold: (value, paths scanned, why it is one).
# Paths (prefixes under the package) are limited where the same number has unrelated uses (a
# plot's padding, the checklist's noise fail boundary) so the scan needs no list of exceptions.
RESTATED = [
    (0.03, ("",), "the tie margin"),
    (0.97, ("",), "one minus the tie margin"),
    (
        0.15,
        ("analysis/training", "analysis/checklist", "analysis/sections", "training", "commands"),
        "the input-bound share",
    ),
    (0.30, ("analysis", "training"), "the former data-wait target, now the input-bound share"),
]
SKIPPED = ("demo",)  # generated images: their noise amplitudes are no decisions


def _sources() -> list[Path]:
    return sorted(
        p
        for p in PACKAGE.rglob("*.py")
        if p.resolve() != HOME and p.relative_to(PACKAGE).parts[0] not in SKIPPED
    )


def _numbers(tree: ast.AST) -> list[tuple[float, int]]:
    return [
        (node.value, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, float)
        and not isinstance(node.value, bool)
    ]


def _public_names() -> set[str]:
    return {name for name in vars(thresholds) if name.isupper()}


def test_the_scan_sees_the_package():
    files = _sources()
    assert len(files) > 100
    assert PACKAGE / "tuning" / "space.py" in files
    assert HOME not in files


@pytest.mark.parametrize(("value", "paths", "meaning"), RESTATED)
def test_no_threshold_literal_outside_its_home(value, paths, meaning):
    found = []
    for path in _sources():
        rel = path.relative_to(PACKAGE)
        if not any(rel.as_posix().startswith(prefix) for prefix in paths):
            continue
        for number, line in _numbers(ast.parse(path.read_text(), str(path))):
            if number == value:
                found.append(f"{rel}:{line}")
    assert not found, f"{value} ({meaning}) written outside thresholds.py: {found}"


def test_no_module_defines_a_threshold_name_again():
    names = _public_names()
    found = []
    for path in _sources():
        for node in ast.parse(path.read_text(), str(path)).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            found += [
                f"{path.relative_to(PACKAGE)}:{node.lineno} {t.id}"
                for t in targets
                if isinstance(t, ast.Name) and t.id in names
            ]
    assert not found, f"thresholds.py's names assigned elsewhere: {found}"


def test_home_is_a_leaf_and_every_threshold_says_why():
    tree = ast.parse(HOME.read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [getattr(n, "module", None) for n in imports] == ["__future__"]
    lines = HOME.read_text().splitlines()
    assigned = [n for n in tree.body if isinstance(n, ast.Assign)]
    assert {t.id for n in assigned for t in n.targets if isinstance(t, ast.Name)} == (
        _public_names()
    )
    for node in assigned:
        above = lines[node.lineno - 2].strip()
        assert above.startswith("#") and above.endswith((".", ")")), lines[node.lineno - 1]
        assert isinstance(node.value, ast.Constant), "a threshold is a number written once"
