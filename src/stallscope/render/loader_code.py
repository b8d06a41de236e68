"""A recommendation as a change to the user's own loader: one builder, several renderings.

The builder (:func:`build_snippet`, :func:`snippet_for_record`) is in
:mod:`stallscope.render.loader_snippet`; this module writes its :class:`Snippet`
out. Everything that shows a loader call renders that one snippet:
``--emit python`` (:func:`render_python`), ``--emit diff`` (:func:`render_diff`:
only the keyword arguments to change), ``--emit yaml`` (:func:`render_yaml`),
the console's "What to set" and the Markdown/HTML reports.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..config import LoaderConfig
from .loader_snippet import KNOB_DEFAULTS, Snippet, build_snippet


def _comment_lines(comment: str | None) -> list[str]:
    return [f"# {line}" for line in (comment or "").splitlines() if line.strip()]


def render_python(snippet: Snippet, *, comment: str | None = None) -> str:
    """``loader = <callable>(...)`` with its imports; ``# was`` / ``# new`` mark the changed
    knobs."""
    lines = _comment_lines(comment)
    if snippet.form == "attributes":
        lines += [f"# note: {note}" for note in snippet.notes]
        lines += snippet.imports + [""] + snippet.prelude
        was = {c.name: c.before for c in snippet.changes}
        for name, source in snippet.arguments:
            before = was.get(name or "")
            lines.append(f"yours{snippet.loader_path}.{name} = {source}  # was {before}")
        return "\n".join([*lines, "loader = yours"]) + "\n"
    if snippet.placeholders():
        lines.append("# <your ...> marks your own object: put the variable that holds it there.")
    lines += [f"# note: {note}" for note in snippet.notes]
    lines += snippet.imports + [""] + snippet.prelude + ([""] if snippet.prelude else [])
    marks = {c.name: c for c in snippet.changes}
    built = f"yours{snippet.loader_path}" if snippet.loader_path else "loader"
    if not snippet.arguments:  # the user's factory as it is: nothing to change
        lines.append(f"{built} = {snippet.callable}()")
        if snippet.loader_path:
            lines.append("loader = yours  # your object, now around the loader above")
        return "\n".join(lines) + "\n"
    lines.append(f"{built} = {snippet.callable}(")
    for name, source in snippet.arguments:
        text = f"    {source}," if name is None else f"    {name}={source},"
        mark = marks.get(name) if name else None
        if mark is not None:
            text += f"  # was {mark.before}" if mark.before is not None else "  # new"
        lines.append(text)
    lines.append(")")
    if snippet.loader_path:
        lines.append("loader = yours  # your object, now around the loader above")
    return "\n".join(lines) + "\n"


def render_diff(snippet: Snippet, *, comment: str | None = None) -> str:
    """Only what to change in the user's call: ``-`` their argument, ``+`` the new one."""
    lines = _comment_lines(comment)
    if not snippet.changes:
        return (
            "\n".join(lines + ["# nothing to change: your loader's settings are the pick"]) + "\n"
        )
    if snippet.form == "attributes":
        set_after = {name for name, _ in snippet.arguments}
        passed = [c for c in snippet.changes if c.name not in set_after | {"torch_threads"}]
        if passed:  # the factory's own parameters (NOTE [a DataLoader's factory])
            lines.append("# call your factory with these keyword arguments")
            lines += [f"+    {c.name}={c.after},  # was {c.before}" for c in passed]
        lines.append(
            "# after building your loader, set these attributes on it"
            + ("" if passed else " (its constructor is left as it is)")
        )
        lines += [
            f"+loader{snippet.loader_path}.{name} = {source}" for name, source in snippet.arguments
        ]
        lines += [
            f"+torch.set_num_threads({c.after})"
            for c in snippet.changes
            if c.name == "torch_threads"
        ]
        return "\n".join(lines) + "\n"
    lines.append(
        f"# change these keyword arguments of your {snippet.callable}(...) call;"
        " keep the others as they are"
    )
    if (
        any(line.startswith("dataset = ss.") for line in snippet.prelude)
        or "import stallscope as ss" in snippet.imports
    ):
        lines.append("+import stallscope as ss")
    for statement in snippet.prelude:
        # your own objects (``yours = ...``) are already at hand in your code
        if not statement.startswith("yours = "):
            lines.append(f"+{statement}")
    for change in snippet.changes:
        if change.name in {"worker_threads", "torch_threads", "batched_fetch"}:
            continue  # shown as statements above, or by the call itself
        if change.before is not None:
            lines.append(f"-    {change.name}={change.before},")
        if change.after is not None:
            lines.append(f"+    {change.name}={change.after},")
    if any(c.name == "worker_threads" for c in snippet.changes):
        lines.append("# and pass `dataset` (the threaded one) to the loader")
    if snippet.callable == "ss.make_loader":
        lines.append("# batched fetching: build the loader with ss.make_loader (see --emit python)")
    return "\n".join(lines) + "\n"


def render_yaml(snippet: Snippet, config: LoaderConfig, *, comment: str | None = None) -> str:
    """The pick as ``config:`` (``LoaderConfig.load`` / ``ss.make_loader(config=path)`` read it),
    with what changed and the user's arguments it keeps."""
    header = "".join(f"{line}\n" for line in _comment_lines(comment))
    body: dict[str, Any] = {"config": config.to_dict()}
    body["changed"] = {c.name: {"was": c.before, "now": c.after} for c in snippet.changes}
    kept = {
        name: source
        for name, source in snippet.arguments
        if name is not None and name not in body["changed"]
    }
    kept = {k: v for k, v in kept.items() if k not in dict(KNOB_DEFAULTS)}
    if kept:
        body["keeps"] = kept
    return header + str(yaml.safe_dump(body, sort_keys=False))


def to_yaml(
    config: LoaderConfig, *, comment: str | None = None, snippet: Snippet | None = None
) -> str:
    """The config as YAML (``LoaderConfig.from_yaml`` reads it back), with optional ``#`` comment
    lines."""
    return render_yaml(snippet or build_snippet(config), config, comment=comment)
