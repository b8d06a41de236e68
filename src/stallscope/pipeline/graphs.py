"""``torchdata.nodes`` graphs as a loader kind (NOTE [loader kinds] in ``kinds.py``): the main
``ParallelMapper``'s workers, method and order and the ``Prefetcher``'s depth are knobs, and a trial
rebuilds the graph through each node's constructor with other values."""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..config import LoaderConfig
from .kinds import SEARCH_OBJECTS, LoaderKind, _children, _qualified


def _nodes() -> Any:
    try:
        import torchdata.nodes as nodes
    except Exception:  # not installed, or a torchdata without nodes
        return None
    return nodes


def is_nodes_graph(obj: Any) -> bool:
    nodes = _nodes()
    return nodes is not None and isinstance(obj, (nodes.Loader, nodes.BaseNode))


def _graph_nodes(root: Any) -> list[Any]:
    """Every node reachable from ``root`` through attributes, root first."""
    nodes = _nodes()
    out: list[Any] = []
    queue, seen = deque([root]), {id(root)}
    while queue and len(out) < SEARCH_OBJECTS:
        node = queue.popleft()
        out.append(node)
        for _, child in _children(node):
            if (
                isinstance(child, nodes.BaseNode)
                and not type(child).__name__.startswith("_")
                and id(child) not in seen
            ):
                seen.add(id(child))
                queue.append(child)
    return out


def _constructor_arguments(obj: Any) -> dict[str, Any] | None:
    """``obj``'s constructor arguments read back from the same-named attributes (the common Python
    convention); None when a required one is not stored."""
    try:
        params = list(inspect.signature(type(obj).__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    out: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in vars(obj):
            out[p.name] = vars(obj)[p.name]
        elif p.default is p.empty:
            return None
    return out


def _rebuild(node: Any, overrides: Callable[[Any], dict[str, Any]], memo: dict[int, Any]) -> Any:
    """A fresh copy of the graph under ``node``, each node built through its constructor."""
    nodes = _nodes()
    if id(node) in memo:
        return memo[id(node)]
    args = _constructor_arguments(node)
    if args is None:
        raise TypeError(f"{_qualified(node)} does not keep its constructor arguments")
    if isinstance(node, nodes.ParallelMapper) and args.get("prebatch"):
        # It stores its source and map_fn already wrapped for pre-batching; pass the originals.
        args["source"], args["map_fn"] = node.source.source, node.map_fn.map_fn
    for name, value in list(args.items()):
        if isinstance(value, nodes.BaseNode):
            args[name] = _rebuild(value, overrides, memo)
    args.update(overrides(node))
    fresh = type(node)(**args)
    memo[id(node)] = fresh
    return fresh


@dataclass
class NodesKind(LoaderKind):
    """A torchdata.nodes graph: rebuilt through its nodes' constructors with other knob values."""

    graph: Any = None  # the user's Loader or root node

    def build(
        self,
        config: LoaderConfig,
        *,
        cycle: bool = False,
        timed: Callable[[Callable[..., Any], str], Any] | None = None,
        **options: Any,
    ) -> Iterable[Any]:
        """``cycle``: the sampler's epochs one after another, so no epoch boundary (and the
        graph's restart) lands in a measurement window. ``timed(fn, name)``: the stages the graph
        declares, timed where they run (NOTE [declared stages] in breakdown/declared.py): each
        mapper's ``map_fn`` and each node's own ``next``."""
        nodes = _nodes()
        root = self.graph.root if isinstance(self.graph, nodes.Loader) else self.graph
        mapper = _main_mapper(root)
        names = _stage_names(root) if timed is not None else {}

        def overrides(node: Any) -> dict[str, Any]:
            out = _config_overrides(node)
            if timed is not None and isinstance(node, nodes.ParallelMapper):
                fn = node.map_fn.map_fn if getattr(node, "prebatch", None) else node.map_fn
                out["map_fn"] = timed(fn, f"{_callable_name(fn)} ({names[id(node)]})")
            return out

        def _config_overrides(node: Any) -> dict[str, Any]:
            if node is mapper:
                out: dict[str, Any] = {
                    "num_workers": config.num_workers,
                    "in_order": config.in_order,
                }
                if config.worker_method:
                    out["method"] = config.worker_method
                return out
            if isinstance(node, nodes.Prefetcher) and config.prefetch_factor:
                return {"prefetch_factor": config.prefetch_factor}
            if isinstance(node, nodes.Batcher) and "batch_size" in self.knobs:
                return {"batch_size": config.batch_size}
            if isinstance(node, nodes.SamplerWrapper) and cycle:
                return {"sampler": RepeatedEpochs(node.sampler)}
            return {}

        memo: dict[int, Any] = {}
        fresh = _rebuild(root, overrides, memo)
        if timed is not None:
            for old_id, node in memo.items():
                name = names.get(old_id)
                if name is not None:
                    waits = _waits(node)
                    label = f"wait: {name}" if waits else name
                    # an instance attribute: BaseNode.__next__ calls self.next()
                    node.next = timed(node.next, label)
        loader: Iterable[Any]
        if isinstance(self.graph, nodes.Loader):
            loader = nodes.Loader(
                fresh, restart_on_stop_iteration=self.graph.restart_on_stop_iteration
            )
        else:
            loader = nodes.Loader(fresh)
        return loader


def _stage_names(root: Any) -> dict[int, str]:
    """Each node's stage name: its class, numbered where the graph has several of one class."""
    found = _graph_nodes(root)
    counts: dict[str, int] = {}
    nodes = _nodes()

    def kind(node: Any) -> str:
        inline = isinstance(node, nodes.ParallelMapper) and not node.num_workers
        return "Mapper" if inline else type(node).__name__  # nodes.Mapper builds an inline one

    for node in found:
        counts[kind(node)] = counts.get(kind(node), 0) + 1
    seen: dict[str, int] = {}
    out: dict[int, str] = {}
    for node in found:
        cls = kind(node)
        seen[cls] = seen.get(cls, 0) + 1
        out[id(node)] = cls if counts[cls] == 1 else f"{cls} {seen[cls]}"
    return out


def _waits(node: Any) -> bool:
    """A node whose ``next`` only takes what its own threads or processes made: its time in
    ``next`` is a wait for them, not work."""
    nodes = _nodes()
    if isinstance(node, nodes.ParallelMapper):
        return bool(node.num_workers)
    return isinstance(node, (nodes.Prefetcher, nodes.PinMemory))


def _callable_name(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not isinstance(name, str):
        func = getattr(fn, "func", None)  # functools.partial
        name = _callable_name(func) if func is not None else type(fn).__name__
    return name.replace("\t", " ")


class RepeatedEpochs:
    """The user's sampler, epoch after epoch (``set_epoch`` called on each, as a training loop
    does)."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[Any]:
        epoch = 0
        while True:
            setter = getattr(self.sampler, "set_epoch", None)
            if callable(setter):
                setter(epoch)
            yielded = False
            for index in self.sampler:
                yielded = True
                yield index
            if not yielded:
                return
            epoch += 1


def _main_mapper(root: Any) -> Any:
    """The ParallelMapper with the most workers (the one doing the heavy work), nearest the root on
    ties."""
    nodes = _nodes()
    mappers = [n for n in _graph_nodes(root) if isinstance(n, nodes.ParallelMapper)]
    return max(mappers, key=lambda m: m.num_workers, default=None)


def other_method(graph: Any) -> tuple[str, ...]:
    """The mapper method the graph does not use (None in a config keeps the graph's own)."""
    nodes = _nodes()
    mapper = _main_mapper(graph.root if isinstance(graph, nodes.Loader) else graph)
    return () if mapper is None else tuple(m for m in ("thread", "process") if m != mapper.method)


def nodes_baseline(graph: Any) -> tuple[LoaderConfig, tuple[str, ...], list[str]]:
    """The graph's own knob values as a LoaderConfig (its mapper's method as None: its own), the
    knobs it has, and what stops a rebuild."""
    nodes = _nodes()
    root = graph.root if isinstance(graph, nodes.Loader) else graph
    found = _graph_nodes(root)
    problems = [
        f"{_qualified(n)} does not keep its constructor arguments"
        for n in found
        if _constructor_arguments(n) is None
    ]
    mapper = _main_mapper(root)
    batcher = next((n for n in found if isinstance(n, nodes.Batcher)), None)
    prefetcher = next((n for n in found if isinstance(n, nodes.Prefetcher)), None)
    knobs: list[str] = []
    workers, in_order = 0, True
    if mapper is not None:
        knobs += ["num_workers", "in_order", "worker_method"]
        workers, in_order = mapper.num_workers, mapper.in_order
    prefetch = prefetcher.prefetch_factor if prefetcher is not None else None
    if prefetcher is not None:
        knobs.append("prefetch_factor")
    batch_size = batcher.batch_size if batcher is not None else 1
    config = LoaderConfig(
        num_workers=workers,
        batch_size=max(1, batch_size),
        prefetch_factor=prefetch if workers else None,
        in_order=in_order,
    )
    if workers == 0 and prefetch:
        config = config.replace(prefetch_factor=None)
    return config, tuple(knobs), problems
