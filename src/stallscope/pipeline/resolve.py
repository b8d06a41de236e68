"""Resolving a TARGET string (``file.py:fn`` or ``package.module:fn``) to the callable it names.

A file is imported by its module name with its folder first on ``sys.path`` (see
:mod:`stallscope.target` for why workers need that).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import UsageError, describe_exception


def split_spec(spec: str) -> tuple[str, str]:
    if ":" not in spec:
        raise UsageError(
            f"target {spec!r} must name a callable as 'path/to/file.py:fn' or 'package.module:fn'."
        )
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise UsageError(
            f"target {spec!r} must look like 'path/to/file.py:fn' or 'package.module:fn'."
        )
    return where, name


def _import_file(path_text: str) -> Any:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise UsageError(f"target file {path_text!r} does not exist.")
    path = path.resolve()
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = path.stem
    existing = sys.modules.get(name)
    if existing is not None and Path(getattr(existing, "__file__", "") or "").resolve() == path:
        return existing
    try:
        module = importlib.import_module(name)
        if Path(getattr(module, "__file__", "") or "").resolve() == path:
            return module
        # The stem names another module (e.g. an installed package): load the file
        # itself. Spawned workers may then not find it; check reports that case.
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    except UsageError:
        raise
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise UsageError(f"importing {path_text} raised {describe_exception(exc)}.") from exc


def _in_working_folder(top: str) -> bool:
    """Whether the top-level module ``top`` is a file or package in the working folder that
    ``sys.path`` does not reach: ``python train.py`` and ``python -m`` put that folder on it, a
    console script does not, and ``stallscope doctor train:make_loader`` run beside ``train.py``
    means that file."""
    here = Path.cwd()
    if str(here) in sys.path or "" in sys.path:
        return False
    return (here / f"{top}.py").is_file() or (here / top / "__init__.py").is_file()


def _import_module(name: str) -> Any:
    try:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            top = name.partition(".")[0]
            if exc.name != top or not _in_working_folder(top):
                raise
            # Appended, not put first: an installed module of that name keeps precedence. Spawned
            # workers receive sys.path, so they import the target the same way.
            sys.path.append(str(Path.cwd()))
            return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise UsageError(
                f"module {name!r} cannot be imported: no module named {exc.name!r}."
            ) from exc
        raise UsageError(f"importing {name} raised {describe_exception(exc)}.") from exc
    except Exception as exc:
        raise UsageError(f"importing {name} raised {describe_exception(exc)}.") from exc


def resolve_callable(spec: str) -> Callable[..., Any]:
    """The object a ``where:name`` spec points at (a file path or a module)."""
    where, name = split_spec(spec)
    looks_like_file = where.endswith(".py") or "/" in where or "\\" in where
    module = _import_file(where) if looks_like_file else _import_module(where)
    obj: Any = module
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{where} has no attribute {name!r}.") from None
    if not callable(obj):
        raise UsageError(f"{spec} is a {type(obj).__name__}, not a callable.")
    function: Callable[..., Any] = obj
    return function
