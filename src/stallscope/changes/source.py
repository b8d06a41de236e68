"""Code changes as unified diffs against the user's own source files, and running the patched code.

A diff is made from the patched text (``difflib``), so it always applies to the file as it is
(``patch -p0`` from the folder its paths are relative to). Before a diff is printed, the patched
module is compiled and executed as a separate module object (``exec_patched``): the user's module
and files stay untouched, and the probe runs the patched classes and functions for two batches
(NOTE [verified snippets] in ``pipeline/verify.py``).
"""

from __future__ import annotations

import ast
import difflib
import inspect
import os
import re
import sys
import types
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class SourceFile:
    path: Path
    module: types.ModuleType
    text: str

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines(keepends=True)


def source_file(obj: Any) -> SourceFile | None:
    """The file and module an object (class, function, instance) was defined in, if readable."""
    target = (
        obj
        if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj)
        else type(obj)
    )
    module = (
        target
        if inspect.ismodule(target)
        else sys.modules.get(getattr(target, "__module__", "") or "")
    )
    if module is None:
        return None
    try:
        path = inspect.getsourcefile(module)
    except TypeError:
        return None
    if not path or not os.path.isfile(path):
        return None
    try:
        return SourceFile(Path(path), module, Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def candidate_files(objects: Iterable[Any]) -> list[SourceFile]:
    seen: dict[Path, SourceFile] = {}
    for obj in objects:
        found = source_file(obj)
        if found is not None and found.path not in seen:
            seen[found.path] = found
    return list(seen.values())


def display_path(path: Path) -> tuple[str, str]:
    """(folder to apply the diff in, the name the diff gives the file): relative to the working
    folder when the file is below it, else the file's own folder (``patch`` refuses absolute
    names)."""
    try:
        return ".", str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve().parent), path.name


def apply_command(path: Path) -> str:
    folder, _ = display_path(path)
    return "patch -p0 < change.diff" if folder == "." else f"patch -p0 -d {folder} < change.diff"


def unified_diff(path: Path, old: str, new: str) -> str:
    _, name = display_path(path)
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), name, name
        )
    )


def method_lines(cls: type, name: str) -> tuple[SourceFile, int, int] | None:
    """(file, first line index, end index) of ``cls.name``'s source, from the class that defines
    it."""
    for klass in cls.__mro__:
        if name in vars(klass):
            func = vars(klass)[name]
            found = source_file(klass)
            if found is None:
                return None
            try:
                lines, start = inspect.getsourcelines(func)
            except (OSError, TypeError):
                return None
            return found, start - 1, start - 1 + len(lines)
    return None


def is_statement(text: str) -> bool:
    try:
        ast.parse(text.strip())
    except SyntaxError:
        return False
    return True


def constructor_block(
    files: Iterable[SourceFile], names: list[str]
) -> tuple[SourceFile, int] | None:
    """Where ``names`` are constructed one per line, in order (``ToTensor(),`` then
    ``Normalize(),``): the file and the index of the first line. Lines between them may only be
    comments."""
    patterns = [constructor_line(n) for n in names]
    for found in files:
        lines = found.lines
        for start in range(len(lines)):
            i, ok = start, True
            for pattern in patterns:
                while i < len(lines) and lines[i].strip().startswith("#") and i > start:
                    i += 1
                if i >= len(lines) or not pattern.match(lines[i].rstrip("\n")):
                    ok = False
                    break
                i += 1
            if ok:
                return found, start
    return None


def constructor_line(name: str) -> re.Pattern[str]:
    """A list line constructing ``name`` (``Normalize(...),`` or ``T.Normalize(...),``)."""
    return re.compile(rf"^\s*(?:[A-Za-z_][\w.]*\.)?{re.escape(name)}\(.*\)\s*,?\s*(#.*)?$")


def block_end(lines: list[str], first: int, last_name: str) -> int:
    """Index of the line constructing ``last_name``, from ``first`` on."""
    pattern = constructor_line(last_name)
    end = first
    while end < len(lines) - 1 and not pattern.match(lines[end].rstrip("\n")):
        end += 1
    return end


def expression_of(line: str) -> str:
    """``Normalize(mean, std)`` from the list line ``    Normalize(mean, std),  # comment``."""
    text = line.split("#", 1)[0].strip() if not line.strip().startswith("#") else ""
    return text[:-1].rstrip() if text.endswith(",") else text


def enclosing_function(source: SourceFile, line_index: int) -> str | None:
    """The module-level function whose body holds ``line_index``."""
    tree = ast.parse(source.text)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.lineno - 1 <= line_index <= (node.end_lineno or node.lineno) - 1:
                return node.name
    return None


@contextmanager
def exec_patched(source: SourceFile, text: str) -> Iterator[types.ModuleType]:
    """The patched text executed as a new module beside the user's (same package, so relative
    imports resolve); registered in ``sys.modules`` only while in use."""
    name = f"{source.module.__name__}__stallscope_patched"
    module = types.ModuleType(name)
    module.__file__ = str(source.path)
    module.__package__ = source.module.__package__
    sys.modules[name] = module
    try:
        exec(compile(text, str(source.path), "exec"), module.__dict__)  # noqa: S102 - the user's code, patched
        yield module
    finally:
        sys.modules.pop(name, None)


def helper_block(title: str, body: str) -> str:
    """Code appended to a user's module, marked so that it is easy to find and remove."""
    return f"\n\n# --- stallscope: {title} ---\n{body.strip()}\n"
