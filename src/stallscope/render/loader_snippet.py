"""The one snippet builder: a recommendation as a change to the user's own loader call.

:func:`build_snippet` takes the pick, the user's baseline knobs and the
description of their call (``loader_call.py``, the record's ``loader``
section; NOTE [loader fidelity]) and returns a :class:`Snippet`: every argument
the user set, kept as they wrote it (their objects imported by name or shown as
a marked ``<your ...>`` placeholder), the tuned knobs, and which of them
changed. :func:`snippet_for_record` builds it from a saved record. Its text
renderings (``--emit python/diff/yaml``, the console's "What to set", the
reports) are in :mod:`stallscope.render.loader_code`.

Seeding is added only where it is missing: torch seeds ``random``, torch and
NumPy's global RNG per worker, but not RNG objects the dataset holds. Where the
dataset holds one (or a ``duplicate-rng`` finding shows identical streams) and
the user has no ``worker_init_fn``, the call gains ``ss.seed_worker``; their own
is always kept, chained with ``ss.seed_worker`` only where a ``duplicate-rng``
finding shows it does not seed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..config import LoaderConfig
from ..loader_call import Argument, LoaderCall
from ..record.model import baseline_of, best_of, findings_of

PLACEHOLDER = re.compile(r"<your (\w+): [^<>]*>")
# Knobs in the order they are written, with torch's default (None: only written when set).
KNOB_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("num_workers", 0),
    ("prefetch_factor", None),
    ("persistent_workers", False),
    ("pin_memory", False),
    ("in_order", True),
    ("multiprocessing_context", None),
)
_DEFAULTS = dict(KNOB_DEFAULTS)


@dataclass
class Change:
    """One argument that differs from the user's call (``before``/``after`` None: absent)."""

    name: str
    before: str | None
    after: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "before": self.before, "after": self.after}


# What in_order=False changes besides the rate, said wherever the code sets it.
ORDER_NOTE = (
    "in_order=False hands over batches as the workers finish them: each batch holds the same "
    "samples, but the order of the batches varies from run to run"
)


@dataclass
class Snippet:
    """The loader call to write, argument by argument, and what changed."""

    callable: str
    imports: list[str]
    prelude: list[str]  # statements before the call (threaded dataset, thread caps)
    arguments: list[tuple[str | None, str]]  # (keyword or None for positional, source)
    changes: list[Change]
    notes: list[str] = field(default_factory=list)
    # "call": the loader's constructor; "factory": the user's factory with other values;
    # "attributes": knobs set on the object the user's factory returns.
    form: str = "call"
    # Where the loader goes back into the object the user's factory returns (".loader" in a
    # wrapper): the code builds the DataLoader, puts it there and measures the wrapper's output,
    # as trials do.
    loader_path: str = ""

    def __post_init__(self) -> None:
        if "in_order" in self.changed and ORDER_NOTE not in self.notes:
            self.notes.append(ORDER_NOTE)  # what the change does besides the rate

    @property
    def changed(self) -> list[str]:
        return [c.name for c in self.changes]

    def placeholders(self) -> dict[str, str]:
        """Each ``<your ...>`` marker in the code -> the role it stands for (``dataset``,
        ``collate_fn``)."""
        found: dict[str, str] = {}
        for text in [src for _, src in self.arguments] + self.prelude:
            for match in PLACEHOLDER.finditer(text):
                found[match.group(0)] = match.group(1)
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "callable": self.callable,
            "changed": self.changed,
            "changes": [c.to_dict() for c in self.changes],
            "placeholders": self.placeholders(),
            "notes": list(self.notes),
        }


# -- building ------------------------------------------------------------------------------


def _literal(value: Any) -> str:
    return repr(value)


def _knob_sources(config: LoaderConfig) -> dict[str, str]:
    """The knobs a config sets, as DataLoader keyword sources (absent: torch's default)."""
    out = {"num_workers": _literal(config.num_workers), "pin_memory": _literal(config.pin_memory)}
    if config.num_workers > 0:
        out["prefetch_factor"] = _literal(config.prefetch_factor)
        out["persistent_workers"] = _literal(config.persistent_workers)
        if not config.in_order:  # only set where the measuring torch had it (>= 2.6)
            out["in_order"] = "False"
        if config.multiprocessing_context:
            out["multiprocessing_context"] = _literal(config.multiprocessing_context)
    return out


def _user_knobs(config: LoaderConfig) -> dict[str, str]:
    """The knobs as the user's call has them: only those differing from torch's defaults."""
    sources = _knob_sources(config)
    defaults = _DEFAULTS
    shown = {}
    for name, source in sources.items():
        if name == "prefetch_factor" and config.prefetch_factor == 2:
            continue  # torch's default with workers
        if name in defaults and defaults[name] is not None and source == _literal(defaults[name]):
            continue
        shown[name] = source
    return shown


def default_call(batch_size: int, *, dataset: str = "dataset") -> LoaderCall:
    """The call for a user who has no loader yet: ``DataLoader(dataset, batch_size=N)``."""
    return LoaderCall(
        arguments=[
            Argument("dataset", dataset, positional=True),
            Argument("batch_size", repr(batch_size)),
        ]
    )


def build_snippet(
    config: LoaderConfig,
    *,
    call: LoaderCall | None = None,
    baseline: LoaderConfig | None = None,
    seeding_missing: bool | None = None,
    through_factory: bool = False,
    own_api: bool = True,
) -> Snippet:
    """The user's call with ``config``'s knobs (see the module docstring).

    ``seeding_missing``: workers would share random streams (a ``duplicate-rng``
    finding, or RNG objects in a dataset without a worker_init_fn); None: not known.
    ``through_factory``: the trials called the user's factory with the knobs (NOTE [loader
    kinds]), so the code calls it too, never the loader's constructor; None when it cannot.
    ``own_api``: where the user's factory takes knobs and returns this DataLoader, the code calls
    it (NOTE [a DataLoader's factory]); False writes the DataLoader call instead.
    """
    call = call or default_call(config.batch_size)
    baseline = baseline or LoaderConfig(batch_size=config.batch_size)
    if (
        call.origin
        and call.origin_is_loader
        and call.arguments
        and not changed_fields(config, baseline)
        and not seeding_missing
    ):
        # Nothing to change: the user's call is their own factory as they call it, not a
        # DataLoader rebuilt from the parts of what it returns (a loader stallscope cannot write
        # as a call keeps no code, as before).
        return Snippet(call.origin_name, list(call.origin_imports), [], [], [], form="factory")
    if own_api and call.own_factory and not through_factory and not seeding_missing:
        own = _own_factory_snippet(config, call, baseline)
        if own is not None:
            return own
    by_factory = _factory_call(config, call, baseline, through_factory=through_factory)
    if by_factory is not None or through_factory:
        if by_factory is None:
            raise ValueError("the factory the trials called takes no parameter for this change")
        return by_factory
    if not call.arguments:
        raise ValueError(
            "no loader call to write: the loader was not built by a DataLoader call stallscope saw"
        )
    imports = list(call.imports)
    prelude: list[str] = []
    notes = [call.note] if call.note else []
    changes: list[Change] = []
    uses_ss = False

    args = [
        Argument(a.name, a.source, list(a.imports), a.placeholder, a.positional)
        for a in call.arguments
    ]
    loader_path = call.loader_path if call.origin else ""
    if call.origin and (loader_path or any(a.placeholder for a in args)):
        # Objects that cannot be imported are read from what the user's factory returns.
        prelude.append(f"yours = {call.origin}")
        imports.extend(call.origin_imports)
        for arg in args:
            path = call.role_paths.get("dataset" if arg.positional else arg.name)
            if arg.placeholder and path is not None:
                arg.source, arg.placeholder = f"yours{path}", False
    for arg in args:
        imports.extend(arg.imports)
    dataset_arg = next((a for a in args if a.positional), None)

    # Batch size: the user's, unless they asked for another (--tune-batch-size, --batch-size).
    size_arg = next((a for a in args if a.name == "batch_size"), None)
    if (
        size_arg is not None
        and size_arg.source != "None"
        and size_arg.source != repr(config.batch_size)
    ):
        changes.append(Change("batch_size", size_arg.source, repr(config.batch_size)))
        size_arg.source = repr(config.batch_size)

    threads = config.worker_threads
    if threads and dataset_arg is not None:
        prelude.append(f"dataset = ss.threaded_dataset({dataset_arg.source}, threads={threads})")
        before_threads = baseline.worker_threads
        changes.append(
            Change("worker_threads", str(before_threads) if before_threads else None, str(threads))
        )
        dataset_arg.source = "dataset"
        uses_ss = True
    if config.torch_threads is not None:
        changes.append(_thread_cap(config.torch_threads, imports, prelude))

    uses_ss |= _seeding(args, config, seeding_missing, changes)

    if config.batched_fetch:
        snippet_args, extra = _make_loader_arguments(args, config, seeding_missing)
        changes.append(Change("batched_fetch", None, "True"))
        notes.append(
            "batched_fetch: one indexing call per batch (stallscope.pipeline.batching)"
            " through ss.make_loader"
        )
        return Snippet(
            "ss.make_loader",
            _merge_imports(imports, True, drop_loader=call.callable),
            prelude,
            snippet_args + extra,
            changes,
            notes,
            loader_path=loader_path,
        )

    before, after = _user_knobs(baseline), _knob_sources(config)
    was, now = _effective(baseline), _effective(config)
    for name, _default in KNOB_DEFAULTS:
        # A knob whose effective value moves with another (prefetch_factor at 0 workers) but that
        # neither call spells out is no change to write.
        if was[name] != now[name] and before.get(name) != after.get(name):
            changes.append(Change(name, before.get(name), after.get(name)))
    keyword = [(None if a.positional else a.name, a.source) for a in args]
    takes = set(call.accepts) if call.accepts is not None else set(after)
    keyword += [(name, after[name]) for name, _ in KNOB_DEFAULTS if name in after and name in takes]
    return Snippet(
        call.callable,
        _merge_imports(imports, uses_ss),
        prelude,
        keyword,
        changes,
        notes,
        loader_path=loader_path,
    )


def changed_fields(config: LoaderConfig, baseline: LoaderConfig) -> list[str]:
    """LoaderConfig fields whose effective value differs from the baseline's."""
    was, now = _effective(baseline), _effective(config)
    out = [name for name in was if was[name] != now[name]]
    for name in (
        "batch_size",
        "worker_threads",
        "torch_threads",
        "batched_fetch",
        "worker_method",
        "snapshot_every_n_steps",
    ):
        if getattr(config, name) != getattr(baseline, name) and (
            name != "worker_method" or config.num_workers
        ):
            out.append(name)
    return out


# NOTE [a DataLoader's factory]
# A target that is a factory taking knobs (``make_loader(num_workers=0, batch_size=32)``) and
# returning a plain DataLoader is measured as that DataLoader: trials rebuild it from its parts
# with other knob values, the same constructor call with the same arguments, so every probe
# (stages, checks, code changes) still runs. The advice is the user's own API:
# ``make_loader(num_workers=6)``, and, for what a DataLoader lets you set once built and the
# factory does not take, ``loader.prefetch_factor = 4`` on what it returns. So the tuner keeps to
# those knobs (``tuning.tuner.limit_to_factory``): persistent_workers the factory does not take is
# measured and advised on its own, not picked. Before it is printed, the call runs, and the
# DataLoader it builds must have the trial's knobs (a factory may derive other arguments from
# ``num_workers``) and batches of the user's structure; where it has not, the DataLoader call is
# written instead, with why (``commands._common.add_verified_advice``).


def _own_factory_snippet(
    config: LoaderConfig, call: LoaderCall, baseline: LoaderConfig
) -> Snippet | None:
    """``loader = make_loader(num_workers=6)``, then any knob the factory does not take set on what
    it returns (NOTE [a DataLoader's factory]); None where a changed knob is neither."""
    by_field = {f: name for name, f in call.factory_parameters.items()}
    was, now = _user_knobs(baseline), _user_knobs(config)
    passed, set_after = [], []
    for f in changed_fields(config, baseline):
        if f in by_field:
            passed.append(f)
        elif was.get(f) == now.get(f) and f in _DEFAULTS:
            continue  # torch's own value once there are workers (prefetch_factor=2)
        elif f in _WITHOUT_WORKERS and not config.num_workers and "num_workers" in by_field:
            # Called with num_workers=0, the factory sets these as it does for no workers
            # (persistent_workers=num_workers > 0): the run before printing checks what it built.
            continue
        elif f in SETTABLE_AFTER_BUILD:
            set_after.append(f)
        else:
            return None
    name = call.origin_name
    arguments: list[tuple[str | None, str]] = [
        (by_field[f], repr(getattr(config, f))) for f in passed
    ]
    changes = [
        Change(by_field[f], repr(getattr(baseline, f)), repr(getattr(config, f))) for f in passed
    ]
    imports, prelude = list(call.origin_imports), list[str]()
    if "torch_threads" in set_after:
        set_after.remove("torch_threads")  # a statement before the call, not an attribute
        if config.torch_threads is not None:
            changes.append(_thread_cap(config.torch_threads, imports, prelude))
    if not set_after:
        return Snippet(name, imports, prelude, arguments, changes, form="factory")
    passing = ", ".join(f"{k}={v}" for k, v in arguments)
    was_all, now_all = _effective(baseline), _effective(config)
    changes += [Change(f, repr(was_all[f]), repr(now_all[f])) for f in set_after]
    return Snippet(
        "",
        imports,
        [*prelude, f"yours = {name}({passing})"],
        [(f, repr(now_all[f])) for f in set_after],
        changes,
        form="attributes",
    )


def _factory_call(
    config: LoaderConfig, call: LoaderCall, baseline: LoaderConfig, *, through_factory: bool = False
) -> Snippet | None:
    """``loader = make_loader(num_workers=4)``: the user's own factory with other knob values, where
    its keyword parameters cover every knob that changed (NOTE [loader kinds]). A loader call of
    the user's is written as that call, unless the trials went through the factory."""
    if not call.origin or not call.factory_parameters:
        return None
    if call.arguments and not through_factory:
        return None
    # A knob that lapses with another (prefetch_factor at 0 workers) is left to the factory.
    changed = [f for f in changed_fields(config, baseline) if getattr(config, f) is not None]
    by_field = {f: name for name, f in call.factory_parameters.items()}
    if through_factory:
        # The trials passed only the factory's parameters; a knob that follows another inside
        # what it builds (prefetch_factor once there are workers) was not set, so is not written.
        changed = [f for f in changed if f in by_field]
    if any(f not in by_field for f in changed):
        return None
    name = call.origin_name
    arguments: list[tuple[str | None, str]] = []
    changes = []
    for f in changed:
        value = getattr(config, f)
        arguments.append((by_field[f], repr(value)))
        changes.append(Change(by_field[f], repr(getattr(baseline, f)), repr(value)))
    return Snippet(name, list(call.origin_imports), [], arguments, changes, form="factory")


# Knobs a DataLoader lets you set after it is built (its __setattr__ refuses batch_size, the
# samplers, drop_last, dataset and persistent_workers), as LoaderConfig fields.
SETTABLE_AFTER_BUILD = (
    "num_workers",
    "prefetch_factor",
    "pin_memory",
    "in_order",
    "multiprocessing_context",
    "snapshot_every_n_steps",
    "torch_threads",
)


def unsettable_after_build(config: LoaderConfig, baseline: LoaderConfig) -> list[str]:
    """The knobs ``config`` changes that a DataLoader refuses once built (so no
    :func:`attribute_snippet` can be written for it)."""
    return [f for f in changed_fields(config, baseline) if f not in SETTABLE_AFTER_BUILD]


def attribute_snippet(
    config: LoaderConfig, call: LoaderCall, baseline: LoaderConfig
) -> Snippet | None:
    """``yours = make_loader()`` then ``yours.num_workers = 4``: the user's own object, built by
    their factory, with the knobs set on it the way trials set them on a copy (NOTE [loader
    kinds]). For a loader whose constructor stallscope cannot call (it builds its dataset from
    arguments it does not keep); None where a changed knob cannot be set after building, or the
    factory cannot be named."""
    if not call.origin:
        return None
    if unsettable_after_build(config, baseline):
        return None
    changed = changed_fields(config, baseline)
    prelude = [f"yours = {call.origin}"]
    imports = list(call.origin_imports)
    cap = (
        _thread_cap(config.torch_threads, imports, prelude)
        if config.torch_threads is not None
        else None
    )
    was, now = _effective(baseline), _effective(config)
    arguments: list[tuple[str | None, str]] = []
    changes = [cap] if cap is not None and "torch_threads" in changed else []
    # torch_threads is a statement above, not an attribute
    for name in (f for f in SETTABLE_AFTER_BUILD if f != "torch_threads"):
        before, after = was.get(name, getattr(baseline, name)), now.get(name, getattr(config, name))
        if before != after:
            arguments.append((name, repr(after)))
            changes.append(Change(name, repr(before), repr(after)))
    if not arguments and "torch_threads" not in changed:
        return None
    return Snippet(
        "", imports, prelude, arguments, changes, form="attributes", loader_path=call.loader_path
    )


def _thread_cap(threads: int, imports: list[str], prelude: list[str]) -> Change:
    """``torch.set_num_threads(n)`` before the loader is built: its import and statement added, and
    the change it is returned."""
    imports.insert(0, "import torch")
    prelude.append(f"torch.set_num_threads({threads})  # main-process intra-op threads")
    return Change("torch_threads", None, str(threads))


# What the knobs that need workers amount to without them (torch refuses the first two set at
# num_workers=0).
_WITHOUT_WORKERS: dict[str, Any] = {
    "prefetch_factor": None,
    "persistent_workers": False,
    "in_order": True,
    "multiprocessing_context": None,
}


def _effective(config: LoaderConfig) -> dict[str, Any]:
    """What each knob amounts to in torch (those that need workers mean nothing without)."""
    effective = {
        "num_workers": config.num_workers,
        "prefetch_factor": config.prefetch_factor,
        "persistent_workers": config.persistent_workers,
        "pin_memory": config.pin_memory,
        "in_order": config.in_order,
        "multiprocessing_context": config.multiprocessing_context,
    }
    if config.num_workers <= 0:
        effective.update(_WITHOUT_WORKERS)
    return effective


def _seeding(
    args: list[Argument], config: LoaderConfig, missing: bool | None, changes: list[Change]
) -> bool:
    """Add ``ss.seed_worker`` where seeding is missing, chained after the user's own
    worker_init_fn if they have one. Returns whether the code now needs ``ss``."""
    if config.num_workers == 0 or not missing:
        return False
    own = next((a for a in args if a.name == "worker_init_fn"), None)
    if own is None:
        args.append(Argument("worker_init_fn", "ss.seed_worker"))
        changes.append(Change("worker_init_fn", None, "ss.seed_worker"))
        return True
    if missing:
        chained = f"ss.chain_worker_init({own.source}, ss.seed_worker)"
        changes.append(Change("worker_init_fn", own.source, chained))
        own.source = chained
        return True
    return False


def _make_loader_arguments(
    args: list[Argument], config: LoaderConfig, seeding_missing: bool | None
) -> tuple[list[tuple[str | None, str]], list[tuple[str | None, str]]]:
    """``ss.make_loader``'s arguments: the dataset, the config, the user's other arguments."""
    fields = ", ".join(f"{k}={v!r}" for k, v in config.to_dict().items() if k != "torch_threads")
    out: list[tuple[str | None, str]] = []
    for arg in args:
        if arg.positional:
            out.append((None, arg.source))
            out.append(("config", f"ss.LoaderConfig({fields})"))
        elif arg.name == "worker_init_fn" and arg.source == "ss.seed_worker":
            continue  # make_loader seeds workers itself
        elif arg.name != "batch_size":
            out.append((arg.name, arg.source))
    own = any(a.name == "worker_init_fn" and a.source != "ss.seed_worker" for a in args)
    extra: list[tuple[str | None, str]] = (
        [("seed_workers", "False")] if own and not seeding_missing else []
    )
    return out, extra


def _merge_imports(lines: list[str], uses_ss: bool, *, drop_loader: str | None = None) -> list[str]:
    """Deduplicated imports, one ``from m import a, b`` per module, ``import stallscope as ss``
    last."""
    plain: list[str] = []
    grouped: dict[str, list[str]] = {}
    for line in lines:
        match = re.fullmatch(r"from (\S+) import (\w+)", line)
        if match:
            if drop_loader is not None and match.group(2) == drop_loader:
                continue
            names = grouped.setdefault(match.group(1), [])
            if match.group(2) not in names:
                names.append(match.group(2))
        elif line not in plain:
            plain.append(line)
    out = plain + [f"from {module} import {', '.join(names)}" for module, names in grouped.items()]
    if uses_ss:
        out.append("import stallscope as ss")
    return out


# -- from a record -------------------------------------------------------------------------


def snippet_for_record(
    data: dict[str, Any], config: dict[str, Any] | None = None, *, form: str = "call"
) -> Snippet | None:
    """The snippet for a record's pick (or ``config``), from its ``loader`` section, baseline and
    findings; ``form="attributes"``: the knobs set on the object the user's factory returns
    (:func:`attribute_snippet`); ``form="rebuild"``: the DataLoader call even where the user's
    factory takes the knobs (NOTE [a DataLoader's factory])."""
    best, recorded = best_of(data), baseline_of(data)
    chosen = config or (best.config if best else None)
    if not chosen:
        return None
    pick = LoaderConfig.from_dict(_known(chosen))
    loader = data.get("loader")
    call = (
        LoaderCall.from_dict(loader)
        if isinstance(loader, dict) and (loader.get("arguments") or loader.get("origin"))
        else None
    )
    kind = data.get("loader_kind") or {}
    if call is None and kind.get("name") not in (None, "dataset", "dataloader"):
        return None  # no DataLoader call of the user's to write (NOTE [loader kinds])
    base = (recorded.config if recorded else None) or (call.knobs if call is not None else None)
    baseline = LoaderConfig.from_dict(_known(base)) if base else None
    codes = {f.code for f in findings_of(data)}
    through_factory = kind.get("name") == "factory"
    if form == "attributes":
        if through_factory:
            return None  # the trials set nothing on the object: they called the factory
        return attribute_snippet(pick, call, baseline or pick) if call is not None else None
    try:
        return build_snippet(
            pick,
            call=call,
            baseline=baseline,
            seeding_missing=seeding_missing(call, codes),
            through_factory=through_factory,
            own_api=form != "rebuild",
        )
    except ValueError:
        return None


def seeding_missing(call: LoaderCall | None, finding_codes: set[Any]) -> bool | None:
    """True where workers would share random streams: a ``duplicate-rng`` finding, or RNG
    objects in the dataset and no worker_init_fn of the user's; None where not known."""
    if "duplicate-rng" in finding_codes:
        return True
    if call is not None and call.rng_attributes and call.argument("worker_init_fn") is None:
        return True
    return None


def _known(config: dict[str, Any]) -> dict[str, Any]:
    """A saved config's LoaderConfig fields (a record from a newer stallscope may carry more)."""
    names = set(LoaderConfig.__dataclass_fields__)
    return {k: v for k, v in config.items() if k in names}
