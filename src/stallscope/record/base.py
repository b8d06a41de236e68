"""The machinery of a typed record section: ``to_dict``/``from_dict`` over a dataclass's fields.

A section is a dataclass whose fields are top-level keys of the (flat) run record (SPEC §5).
``from_dict`` reads those keys from a record dict and gives each key an older record lacks, or
holds with the wrong JSON type, its field's default, so analysis can read a section without
guarding every key (pyinstrument's session loads older files the same way).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, Union

from .model import field_default

S = TypeVar("S", bound="Section")

_MISSING = object()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _matches(value: Any, hint: Any) -> bool:
    """Whether a JSON value has the type ``hint`` names (shallow: a list's items are not read)."""
    if hint is Any or hint is object:
        return True
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin is not None:
        hint = origin
    if hint is float:
        return _is_number(value)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is bool:
        return isinstance(value, bool)
    if hint in (str, list, dict):
        return isinstance(value, hint)
    if isinstance(hint, type) and issubclass(hint, Section):
        return isinstance(value, Mapping)
    return True


def _section_of(hint: Any) -> type[Section] | None:
    """The Section class inside ``hint`` (``Scaling | None`` gives Scaling), if there is one."""
    candidates = typing.get_args(hint) if typing.get_origin(hint) is not None else (hint,)
    for arg in candidates:
        if isinstance(arg, type) and issubclass(arg, Section):
            return arg
    return None


@dataclasses.dataclass
class Section:
    """Base of every record section; subclasses are dataclasses whose fields all have defaults.

    Each field's ``metadata["doc"]`` says what the key holds (the schema's description repeats it).
    """

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def docs(cls) -> dict[str, str]:
        return {f.name: str(f.metadata.get("doc", "")) for f in dataclasses.fields(cls)}

    def to_dict(self) -> dict[str, Any]:
        """Every key of the section, nested sections as dicts."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.to_dict() if isinstance(value, Section) else value
        return out

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any]) -> S:
        """The section read from a record dict (or a nested section's dict); a key that is missing,
        null where a value belongs, or of the wrong JSON type takes the field's default."""
        hints = typing.get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            value = data.get(f.name, _MISSING) if isinstance(data, Mapping) else _MISSING
            hint = hints[f.name]
            if value is _MISSING or not _matches(value, hint):
                kwargs[f.name] = field_default(f)
                continue
            nested = _section_of(hint)
            if nested is not None and isinstance(value, Mapping):
                value = nested.from_dict(value)
            kwargs[f.name] = value
        return cls(**kwargs)


def doc(text: str, **kwargs: Any) -> Any:
    """``dataclasses.field`` carrying the key's one-line description; the default is None unless
    ``default`` or ``default_factory`` says otherwise."""
    if "default_factory" not in kwargs:
        kwargs.setdefault("default", None)
    return dataclasses.field(metadata={"doc": text}, **kwargs)
