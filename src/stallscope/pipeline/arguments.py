"""The user's DataLoader call, described so that a recommendation is a change to it.

NOTE [loader fidelity]
A DataLoader target is the user's loader as it is: its sampler, batch_sampler,
collate_fn, worker_init_fn, generator, drop_last, shuffle, timeout,
pin_memory_device and multiprocessing context are kept in every trial
(``pipeline/loaders.py`` builds trial loaders from them, cycling the user's own
sampler so new epochs re-iterate it); only the tuned knobs change. Samples are
counted from the index lists the sampler yields.

This module describes the call as plain data (:mod:`stallscope.loader_call`, the record's
``loader`` section),
so that the one snippet builder (``render/loader_snippet.py``) can write a recommendation
from a saved record: every argument the user set, each user object referred to
by ``from module import name`` where it is importable as that very object, else
by a marked placeholder ``<your collate_fn: module.Class instance>``.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Sequence
from typing import Any

from ..config import LOADER_KNOBS
from ..loader_call import Argument, LoaderCall

# DataLoader arguments the tuner sets; the description leaves them to the config.
KNOBS = LOADER_KNOBS
# How many of the user's batches are read to describe their sizes (bounded: a sampler may be
# infinite).
SIZE_SAMPLE_BATCHES = 2000


# -- referring to the user's objects ----------------------------------------------------------


def _importable(module: str | None, qualname: str | None, obj: Any) -> str | None:
    """``from module import Top`` when ``module.qualname`` is ``obj`` itself, else None."""
    if not module or not qualname or "<locals>" in qualname or module == "__main__":
        return None
    mod = sys.modules.get(module)
    if mod is None:
        try:
            mod = importlib.import_module(module)
        except Exception:
            return None
    found: Any = mod
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    same = found is obj or (
        getattr(found, "__func__", None) is getattr(obj, "__func__", obj) and inspect.isroutine(obj)
    )
    return f"from {module} import {qualname.split('.')[0]}" if same else None


def _module_global(obj: Any, modules: Sequence[str] = ()) -> tuple[str, str] | None:
    """(module, name) of a module-level global bound to this very object, looked for in
    ``modules`` (the target's module) and its class's module."""
    for module in (*modules, getattr(type(obj), "__module__", None)):
        mod = sys.modules.get(module or "")
        if mod is None or module == "__main__":
            continue
        for name, value in list(vars(mod).items()):
            if value is obj and not name.startswith("_"):
                return module, name  # type: ignore[return-value]
    return None


def _type_name(obj: Any) -> str:
    cls = type(obj)
    module = (
        "torch" if cls.__module__.startswith("torch._C") else cls.__module__
    )  # torch.Generator, not torch._C
    return f"{module}.{cls.__qualname__}" if module != "builtins" else cls.__qualname__


def placeholder(role: str, obj: Any) -> str:
    """The marked stand-in for a user object we cannot import, e.g.
    ``<your collate_fn: mod.Collater instance>``."""
    if inspect.isroutine(obj):
        name = getattr(obj, "__qualname__", getattr(obj, "__name__", "?"))
        what = f"{getattr(obj, '__module__', '?')}.{name}"
    else:
        what = f"{_type_name(obj)} instance"
    # The marker must stay one bracketed token: <lambda> and <locals> lose their brackets.
    return f"<your {role}: {what.replace('<', '').replace('>', '')}>"


def reference(
    role: str,
    obj: Any,
    *,
    dataset: Any = None,
    dataset_source: str | None = None,
    modules: Sequence[str] = (),
) -> Argument:
    """An :class:`Argument` whose source reproduces ``obj``: a literal, an import, or a placeholder.

    ``modules`` are searched for a global holding ``obj`` (besides its class's module).
    """
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return Argument(role, repr(obj))
    bound_to = getattr(obj, "__self__", None)
    if inspect.ismethod(obj) and dataset is not None and bound_to is dataset and dataset_source:
        return Argument(
            role, f"{dataset_source}.{obj.__name__}", placeholder="<your" in dataset_source
        )
    if inspect.isroutine(obj) or inspect.isclass(obj):
        line = _importable(
            getattr(obj, "__module__", None), getattr(obj, "__qualname__", None), obj
        )
        if line is not None:
            return Argument(role, obj.__qualname__, imports=[line])
        return Argument(role, placeholder(role, obj), placeholder=True)
    found = _module_global(obj, modules)
    if found is not None:
        return Argument(role, found[1], imports=[f"from {found[0]} import {found[1]}"])
    return Argument(role, placeholder(role, obj), placeholder=True)


# -- describing a loader ------------------------------------------------------------------------


def _sizes_of(batches: Any) -> dict[str, float] | None:
    """min/max/mean/count of the first index lists a batch sampler yields (bounded)."""
    sizes: list[int] = []
    try:
        for indices in batches:
            sizes.append(len(indices))
            if len(sizes) >= SIZE_SAMPLE_BATCHES:
                break
    except Exception:
        return None
    if not sizes:
        return None
    return {
        "min": min(sizes),
        "max": max(sizes),
        "mean": sum(sizes) / len(sizes),
        "batches": len(sizes),
    }


def _takes_loader_keywords(cls: type[Any]) -> bool:
    """Whether a DataLoader subclass's constructor passes DataLoader's keywords through."""
    try:
        params = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return False
    names = {p.name for p in params}
    return any(p.kind is p.VAR_KEYWORD for p in params) or {"num_workers", "batch_size"} <= names


def describe_loader(loader: Any, *, modules: Sequence[str] = ()) -> LoaderCall:
    """The arguments the user gave their DataLoader (those that differ from torch's defaults).

    ``modules``: where the user's objects may live as globals (the target's module).
    """
    from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler
    from torch.utils.data._utils.collate import default_collate, default_convert

    dataset = loader.dataset
    call = LoaderCall()
    cls = type(loader)
    if cls is not DataLoader:
        line = _importable(cls.__module__, cls.__qualname__, cls)
        call.loader_class = f"{cls.__module__}:{cls.__qualname__}"
        if line is not None and _takes_loader_keywords(cls):
            call.callable, call.imports = cls.__qualname__, [line]
        else:
            call.note = (
                f"your loader class {cls.__qualname__} cannot take these keywords here; "
                "this is the equivalent torch DataLoader call"
            )

    def ref(role: str, obj: Any) -> Argument:
        return reference(role, obj, dataset=dataset, dataset_source=data.source, modules=modules)

    data = reference("dataset", dataset, modules=modules)
    data.positional = True
    args = [data]
    if loader.batch_size is not None:
        args.append(Argument("batch_size", repr(loader.batch_size)))
    elif loader.batch_sampler is not None:
        call.batching = "batch_sampler"
        args.append(ref("batch_sampler", loader.batch_sampler))
        call.batch_sizes = _sizes_of(loader.batch_sampler)
    else:
        args.append(Argument("batch_size", "None"))
    sampler = loader.sampler
    if call.batching == "batch_size":
        is_default_random = (
            type(sampler) is RandomSampler
            and not sampler.replacement
            and sampler._num_samples is None
            and sampler.generator is loader.generator
        )
        if is_default_random:
            args.append(Argument("shuffle", "True"))
        elif type(sampler) is not SequentialSampler and not isinstance(dataset, IterableDataset):
            args.append(ref("sampler", sampler))  # a stream's sampler is torch's own placeholder
        if loader.drop_last:
            args.append(Argument("drop_last", "True"))
    if loader.collate_fn not in (default_collate, default_convert):
        args.append(ref("collate_fn", loader.collate_fn))
    if loader.worker_init_fn is not None:
        args.append(ref("worker_init_fn", loader.worker_init_fn))
    if loader.generator is not None:
        args.append(ref("generator", loader.generator))
    if loader.timeout:
        args.append(Argument("timeout", repr(loader.timeout)))
    if getattr(loader, "pin_memory_device", ""):
        args.append(Argument("pin_memory_device", repr(loader.pin_memory_device)))
    call.arguments = args
    call.rng_attributes = rng_attributes(dataset)
    call.role_paths = {a.name: f".{a.name}" for a in args}
    if cls is not DataLoader and call.callable == cls.__qualname__:
        _replay_constructor(call, loader, cls, modules)
    return call


def _replay_constructor(
    call: LoaderCall, loader: Any, cls: type[Any], modules: Sequence[str]
) -> None:
    """A subclass whose constructor does not take every DataLoader argument we described (it builds
    its dataset or collate itself, or takes required keyword-only arguments of its own): write the
    call with its own parameters instead, each read back from the same-named attribute."""
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    names = {p.name for p in params}
    described = {"dataset" if a.positional else a.name for a in call.arguments}
    if described <= names:
        return
    args: list[Argument] = []
    for p in params:
        if p.kind is p.VAR_POSITIONAL or p.name in KNOBS:
            continue
        if p.name in vars(loader):
            arg = reference(p.name, vars(loader)[p.name], modules=modules)
        elif p.name in described:
            arg = next(
                a for a in call.arguments if (a.name if not a.positional else "dataset") == p.name
            )
            arg = Argument(p.name, arg.source, list(arg.imports), arg.placeholder)
        elif p.default is not p.empty:
            continue
        else:
            call.note = (
                f"{cls.__qualname__}() needs {p.name!r}, which the loader does not keep"
                " under that name"
            )
            return
        arg.positional = False
        args.append(arg)
    call.arguments = args
    call.accepts = [k for k in KNOBS if k in names]
    call.role_paths = {a.name: f".{a.name}" for a in args}


def rng_attributes(dataset: Any) -> list[str]:
    """Attribute paths of RNG objects inside the dataset (bounded search, see seeding.find_rngs)."""
    from .seeding import find_rngs

    try:
        return [path for path, _ in find_rngs(dataset, "dataset")]
    except Exception:
        return []


def describe_dataset_call(
    dataset: Any, batch_size: int, collate_fn: Any = None, *, modules: Sequence[str] = ()
) -> LoaderCall:
    """The DataLoader call for a Dataset (or dict) target: the user has no loader of their own
    yet."""
    data = reference("dataset", dataset, modules=modules)
    data.positional = True
    args = [data, Argument("batch_size", repr(batch_size))]
    if collate_fn is not None:
        args.append(
            reference(
                "collate_fn",
                collate_fn,
                dataset=dataset,
                dataset_source=data.source,
                modules=modules,
            )
        )
    return LoaderCall(
        arguments=args, rng_attributes=rng_attributes(dataset), role_paths={"dataset": ""}
    )
