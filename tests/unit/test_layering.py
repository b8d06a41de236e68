"""One way through the package: probes → record → analysis → renderers.

Analysis and renderers read records only, so no module of ``analysis/`` or ``render/`` imports a
probe package; probes record measurements and never render. Imports are read with ``ast``
(nothing is imported), inside functions and ``TYPE_CHECKING`` blocks too, relative ones resolved.
"""

from __future__ import annotations

import ast
from pathlib import Path

import stallscope

PACKAGE_DIR = Path(stallscope.__file__).parent

# Packages that run the user's pipeline, or drive it (commands, integrations, the demo, targets).
PROBES = (
    "tuning",
    "throughput",
    "training",
    "checks",
    "breakdown",
    "pipeline",
    "changes",
    "runtime",
    "commands",
    "integrations",
    "demo",
    "target",
    "attach",
)
# Surfaces call renderers by design: a command prints its report, a training-loop callback its
# summary. Watch.summary() is the same surface on ss.watch(...), kept from 0.1.
RENDERING_SURFACES = ("commands", "integrations")
SURFACE_IMPORTS = {("stallscope.training.watch", "stallscope.render.console_profile")}


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


def surface_import(module: str, name: str) -> bool:
    return any(
        module == m and (name == allowed or name.startswith(allowed + "."))
        for m, allowed in SURFACE_IMPORTS
    )


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


def test_probes_do_not_render():
    probes = [p for p in PROBES if p not in RENDERING_SURFACES]
    bad = sorted(
        f"{module_name(path)} imports {name}"
        for path in files_under(*probes)
        for name in imports_of(path)
        if in_packages(name, ("render",)) and not surface_import(module_name(path), name)
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
