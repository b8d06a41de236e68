"""What a sample or batch is made of, whatever container holds it: its payload bytes
(``nbytes``), the samples it holds (``batch_length``) and a compact description
(``describe_structure``).

Batches are not only dicts, lists and tuples: transformers' ``BatchEncoding`` and
``collections.UserDict`` are Mappings that are not dicts, a collate may return a
dataclass or a named tuple, and a text batch may be a list of variable-length
items. Each helper walks all of these the same way (:func:`children`), so a
``BatchEncoding`` of token tensors counts its bytes instead of 0.

Token batches are counted in tokens as well (:func:`token_counter`): a Mapping with
``input_ids`` (its ``attention_mask``'s ones where it has one: padding is not work),
a batch that is one integer matrix or starts with one (``(inputs, targets)`` of a
language-model stream), or a list of variable-length integer sequences.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_MAX_DEPTH = 8  # nested deeper than this is not a batch: stop rather than recurse forever


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def children(obj: Any) -> list[tuple[str, Any]] | None:
    """``[(key, value)]`` of a container a batch can be (Mapping, dataclass instance,
    named tuple, list, tuple); None for a leaf (a tensor, an array, a number, a string)."""
    if isinstance(obj, (str, bytes, bytearray, memoryview)):
        return None
    if isinstance(obj, Mapping):
        return [(str(k), v) for k, v in obj.items()]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [(f.name, getattr(obj, f.name, None)) for f in dataclasses.fields(obj)]
    if _is_namedtuple(obj):
        return list(zip(type(obj)._fields, obj))
    if isinstance(obj, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(obj)]
    return None


def shallow_copy(obj: Any) -> Any:
    """``copy.copy(obj)``, except where copying would go wrong on a plain object (its state all in
    ``__dict__``, no ``__copy__`` of its own):

    - it disguises its class (a ``__class__`` property, as adapters that pass for a DataLoader
      have): copying goes by ``__class__`` and would make the class it claims, losing the
      adapter's own iteration;
    - its class forwards unknown attributes (``__getattr__``, as wrapper datasets do): the copy
      ``copy.copy`` makes looks up ``__setstate__`` on a new instance whose attributes are not set
      yet, and ``__getattr__`` then recurses, deep enough in C to crash the interpreter rather
      than raise ``RecursionError``.

    Such an object is copied as its real type, its ``__dict__`` carried over."""
    cls = type(obj)
    plain = isinstance(getattr(obj, "__dict__", None), dict) and not hasattr(cls, "__copy__")
    forwards = getattr(cls, "__getattr__", None) is not None
    if plain and (cls is not obj.__class__ or forwards):
        clone = object.__new__(cls)
        clone.__dict__.update(obj.__dict__)
        return clone
    return copy.copy(obj)


def as_built(dataset: Any) -> Any:
    """A shallow copy of ``dataset`` for a fetch in this process, so that what ``__getitem__`` or
    ``__iter__`` sets on it stays off the user's object: a handle opened on first use (``if
    self.file is None: self.file = h5py.File(...)``, the usual way to keep an HDF5 or LMDB file
    out of the pickle) would otherwise be open on it when a later trial pickles it for spawn
    workers or forks it into workers that then share the handle, a failure of stallscope's own
    making. The dataset itself where it cannot be copied."""
    try:
        return shallow_copy(dataset)
    except Exception:
        return dataset


def fetch_for_collate(dataset: Any, indices: Sequence[Any]) -> Any:
    """What a DataLoader hands its collate for one batch of a map-style dataset: the dataset's
    own ``__getitems__(indices)`` where it has one (torch's fetcher calls it instead of
    ``__getitem__``, and what it returns need not be a list: a ``TensorDict`` returns the batch
    itself, for an identity collate), else the list of its items."""
    getitems = getattr(dataset, "__getitems__", None)
    if getitems:
        return getitems(list(indices))
    return [dataset[i] for i in indices]


def to_device(obj: Any, device: Any, *, non_blocking: bool = False) -> Any:
    """``obj`` with every tensor it holds copied to ``device``, its containers rebuilt as their own
    types where they can be (else as a dict or list). An object that is no container but has a
    ``to`` method of its own (a graph library's ``Batch``) is moved by it, the convention
    Lightning's ``move_data_to_device`` follows. A copy from pinned memory with ``non_blocking``
    returns before it ends: synchronise before reading the clock."""
    if _array_kind(obj) == "tensor":
        return obj.to(device, non_blocking=non_blocking)
    parts = children(obj)
    if parts is None:
        move = getattr(obj, "to", None)
        if not callable(move) or isinstance(obj, type):
            return obj
        try:
            return move(device, non_blocking=non_blocking)
        except TypeError:  # a ``to`` without that keyword
            return move(device)
    return _rebuilt(
        obj, [to_device(value, device, non_blocking=non_blocking) for _, value in parts]
    )


def _rebuilt(obj: Any, items: list[Any]) -> Any:
    """A container of ``obj``'s type holding ``items``, in the order :func:`children` walks it;
    a dict or list where its type cannot be built from them."""
    if isinstance(obj, Mapping):
        rebuilt = dict(zip(obj.keys(), items))  # its own keys, not children's strings of them
        with contextlib.suppress(Exception):
            return type(obj)(rebuilt)  # type: ignore[call-arg]  # dict-like: UserDict, BatchEncoding
        return rebuilt
    if dataclasses.is_dataclass(obj):
        values = {f.name: item for f, item in zip(dataclasses.fields(obj), items)}
        with contextlib.suppress(Exception):
            return dataclasses.replace(obj, **values)  # type: ignore[type-var]
        return values
    if _is_namedtuple(obj):
        return type(obj)(*items)
    if isinstance(obj, tuple):
        with contextlib.suppress(Exception):
            return type(obj)(items)
        return tuple(items)
    return items


def _array_kind(obj: Any) -> str | None:
    """ "tensor", "ndarray" or None. Subclasses count as what they extend (grain's
    ``SharedMemoryArray``, a library's tensor subclass): the classes' modules are read first, so
    an arbitrary object never imports torch or NumPy."""
    modules = {(cls.__module__ or "").partition(".")[0] for cls in type(obj).__mro__}
    if "torch" in modules:
        import torch

        if isinstance(obj, torch.Tensor):
            return "tensor"
    if "numpy" in modules:
        import numpy as np

        if isinstance(obj, np.ndarray):
            return "ndarray"
    return None


def nbytes(obj: Any, _depth: int = 0) -> int:
    """Bytes of tensor, array and bytes payload in a (nested) sample or batch."""
    kind = _array_kind(obj)
    if kind == "tensor":
        return int(obj.element_size() * obj.nelement())
    if kind == "ndarray":
        return int(obj.nbytes)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return len(obj)
    if _depth > _MAX_DEPTH:
        return 0
    parts = children(obj)
    if parts is None:
        parts = _attributes(obj)
    return sum(nbytes(v, _depth + 1) for _, v in parts or ())


def _attributes(obj: Any) -> list[tuple[str, Any]] | None:
    """The instance attributes of a plain object, which are what pickling it sends: a batch class
    of a library's own (a graph library's ``Batch``) keeps its tensors there, often behind a Mapping
    of its own. None for classes, modules and functions."""
    if isinstance(obj, (type, types.ModuleType, types.FunctionType, types.MethodType)):
        return None
    state = getattr(obj, "__dict__", None)
    return list(state.items()) if isinstance(state, dict) else None


def batch_length(batch: Any, _depth: int = 0) -> int:
    """Samples in a collated batch: the leading dimension of its first tensor or array,
    else the length of its first list of items, else its own length (1 for a scalar)."""
    kind = _array_kind(batch)
    if kind is not None:
        shape = tuple(batch.shape)
        return int(shape[0]) if shape else 1
    if _depth <= _MAX_DEPTH:
        parts = children(batch)
        if parts is not None:
            if isinstance(batch, list) and not _is_namedtuple(batch):
                # a list of per-sample items (variable length), or of per-field batches
                first = batch[0] if batch else None
                if first is not None and (
                    _array_kind(first) is not None or children(first) is not None
                ):
                    return batch_length(first, _depth + 1)
                return len(batch)
            if not parts:
                return 0
            if isinstance(batch, tuple) and not _is_namedtuple(batch):
                first = parts[0][1]
                if _array_kind(first) is None and children(first) is None:
                    return len(batch)
            return batch_length(parts[0][1], _depth + 1)
    try:
        return len(batch)
    except TypeError:
        return 1


def describe_structure(obj: Any, depth: int = 0) -> str:
    """A compact type/shape description: ``tuple(Tensor[3,224,224] float32, int)``,
    ``BatchEncoding{input_ids: Tensor[8,512] int64, …}``."""
    if depth > 3:
        return "…"
    kind = _array_kind(obj)
    if kind == "tensor":
        return f"Tensor[{','.join(map(str, obj.shape))}] {str(obj.dtype).replace('torch.', '')}"
    if kind == "ndarray":
        return f"ndarray[{','.join(map(str, obj.shape))}] {obj.dtype}"
    parts = children(obj)
    if parts is None:
        return type(obj).__name__
    shown = parts[:6]
    more = ", …" if len(parts) > 6 else ""
    if (
        isinstance(obj, Mapping)
        or (dataclasses.is_dataclass(obj) and not isinstance(obj, type))
        or _is_namedtuple(obj)
    ):
        inner = ", ".join(f"{k}: {describe_structure(v, depth + 1)}" for k, v in shown)
        name = "" if type(obj) is dict else type(obj).__name__
        return f"{name}{{{inner}{more}}}"
    inner = ", ".join(describe_structure(v, depth + 1) for _, v in shown)
    return f"{type(obj).__name__}({inner}{more})"


TOKEN_KEYS = ("input_ids", "token_ids", "tokens")


def _int_matrix(obj: Any) -> bool:
    """A 2-D integer tensor or array: rows of token ids."""
    kind = _array_kind(obj)
    if kind is None or len(obj.shape) != 2:
        return False
    dtype = str(obj.dtype)
    return "int" in dtype and "uint8" not in dtype  # uint8 matrices are pixels, not token ids


def _int_sequence(obj: Any) -> bool:
    kind = _array_kind(obj)
    if kind is not None:
        return len(obj.shape) == 1 and "int" in str(obj.dtype) and "uint8" not in str(obj.dtype)
    return isinstance(obj, (list, tuple)) and bool(obj) and all(type(v) is int for v in obj[:8])


def _mask_ones(mask: Any, ids: Any) -> int | None:
    if _array_kind(mask) is None or tuple(mask.shape) != tuple(ids.shape):
        return None
    return int(mask.sum())


def token_counter(batch: Any) -> Callable[[Any], int] | None:
    """How to count the tokens of batches shaped like ``batch``, or None when it does not hold
    token ids (decided once, from the first batch: nothing is paid per batch otherwise)."""
    parts = children(batch)
    if isinstance(batch, Mapping) or (
        parts is not None and (_is_namedtuple(batch) or not isinstance(batch, (list, tuple)))
    ):
        named = dict(parts or [])
        key = next((k for k in TOKEN_KEYS if k in named and _int_matrix(named[k])), None)
        if key is None:
            return None

        def from_mapping(b: Any) -> int:
            fields = dict(children(b) or [])
            ids = fields[key]
            ones = _mask_ones(fields["attention_mask"], ids) if "attention_mask" in fields else None
            return ones if ones is not None else int(ids.shape[0] * ids.shape[1])

        return from_mapping
    if _int_matrix(batch):
        return lambda b: int(b.shape[0] * b.shape[1])
    if isinstance(batch, tuple) and batch and _int_matrix(batch[0]):
        return lambda b: int(b[0].shape[0] * b[0].shape[1])
    if isinstance(batch, list) and batch and all(_int_sequence(v) for v in batch[:8]):
        return lambda b: sum(len(v) for v in b)
    return None
