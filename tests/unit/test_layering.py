"""One way through the package: probes → record → analysis → renderers, checked both ways.

Analysis and renderers read records only, so no module of ``analysis/`` or ``render/`` imports a
probe package; probes record measurements and never judge or render, so no probe module imports
``analysis/`` or ``render/``. No allowlist either way. The surfaces above both (``commands/``,
``integrations/``, the library surface ``stallscope.api``) run probes and print what analysis
makes of them. Imports are read with ``ast`` (nothing is imported), inside functions and
``TYPE_CHECKING`` blocks too, relative ones resolved.
"""

from __future__ import annotations

import ast
from pathlib import Path

import stallscope

PACKAGE_DIR = Path(stallscope.__file__).parent

# Packages (and modules) that run the user's pipeline or measure it.
PROBES = (
    "tuning",
    "throughput",
    "training",
    "checks",
    "breakdown",
    "pipeline",
    "changes",
    "runtime",
    "attach",
    "demo",
    "target",
)
JUDGES = ("analysis", "render")
# Surfaces: they drive probes and print what analysis concludes (a command's report, a training
# loop callback's summary, ``ss.tune(...).recommendations()``), so they may import both sides.
SURFACES = ("commands", "integrations", "api", "cli")


def imports_of(path: Path) -> set[str]:
    """Every dotted name ``path`` imports (``from a import b`` gives ``a`` and ``a.b``)."""
    parts = ["stallscope", *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
    package = parts[:-1]  # what ``from .`` names, for a module and for an ``__init__`` alike
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)
    return found


def module_name(path: Path) -> str:
    parts = ["stallscope", *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def in_packages(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == f"stallscope.{p}" or name.startswith(f"stallscope.{p}.") for p in packages)


def files_under(*packages: str) -> list[Path]:
    files: list[Path] = []
    for p in packages:
        where = PACKAGE_DIR / p
        files += sorted(where.rglob("*.py")) if where.is_dir() else [where.with_suffix(".py")]
    return files


def test_analysis_and_render_import_no_probe():
    files = files_under("analysis", "render")
    assert len(files) > 30  # the walk really read both packages
    bad = sorted(
        f"{module_name(path)} imports {name}"
        for path in files
        for name in imports_of(path)
        if in_packages(name, PROBES)
    )
    assert bad == []


def test_probes_import_no_analysis_and_no_renderer():
    files = files_under(*PROBES)
    assert len(files) > 100  # the walk really read every probe package
    bad = sorted(
        f"{module_name(path)} imports {name}"
        for path in files
        for name in imports_of(path)
        if in_packages(name, JUDGES)
    )
    assert bad == []


def test_every_package_is_placed():
    """A new subpackage or top-level module must be put on one side (or be shared vocabulary
    below both), so neither test above can miss it."""
    shared = {
        "__init__",
        "__main__",
        "config",
        "errors",
        "growth",
        "lazy",
        "loader_call",
        "record",
        "schema",
        "stats",
        "text",
        "thresholds",
    }
    found = {p.stem if p.is_file() else p.name for p in PACKAGE_DIR.iterdir()}
    found = {n for n in found if not n.startswith((".", "_")) or n in shared}
    found.discard("py")  # py.typed
    placed = set(PROBES) | set(JUDGES) | set(SURFACES) | shared
    assert found - placed == set()


def test_shared_modules_import_neither_side():
    shared = (
        "config",
        "errors",
        "growth",
        "lazy",
        "loader_call",
        "record",
        "stats",
        "text",
        "thresholds",
    )
    bad = sorted(
        f"{module_name(path)} imports {name}"
        for path in files_under(*shared)
        for name in imports_of(path)
        if in_packages(name, PROBES + JUDGES + SURFACES)
    )
    assert bad == []


def test_relative_and_function_level_imports_are_read(tmp_path, monkeypatch):
    where = tmp_path / "stallscope" / "render"
    where.mkdir(parents=True)
    (where / "x.py").write_text(
        "def f():\n    from ..tuning import search\n    from .. import training\n"
        "    import stallscope.checks.rules\n"
    )
    monkeypatch.setitem(globals(), "PACKAGE_DIR", tmp_path / "stallscope")
    found = imports_of(where / "x.py")
    assert {"stallscope.tuning", "stallscope.training", "stallscope.checks.rules"} <= found
    assert all(in_packages(n, PROBES) for n in found - {"stallscope"})
