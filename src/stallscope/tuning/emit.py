"""Emitting a tuned config: YAML for ``make_loader(config=path)``, or a ready ``DataLoader(...)`` call."""

from __future__ import annotations

from ..config import LoaderConfig, loader_supports


def to_yaml(config: LoaderConfig, *, comment: str | None = None) -> str:
    """The config as YAML (``LoaderConfig.from_yaml`` reads it back), with optional ``#`` comment lines."""
    header = "".join(f"# {line}\n" for line in (comment or "").splitlines() if line.strip())
    return header + config.to_yaml()


def _arguments(config: LoaderConfig, *, dataset: str, collate_fn: str | None, shuffle: bool, drop_last: bool) -> list[str]:
    args = [dataset, f"batch_size={config.batch_size}"]
    if shuffle:
        args.append("shuffle=True")
    args.append(f"num_workers={config.num_workers}")
    if config.num_workers > 0:
        args.append(f"prefetch_factor={config.prefetch_factor}")
        args.append(f"persistent_workers={config.persistent_workers}")
        if not config.in_order and loader_supports("in_order"):
            args.append("in_order=False")
        if config.multiprocessing_context:
            args.append(f"multiprocessing_context={config.multiprocessing_context!r}")
        args.append("worker_init_fn=ss.seed_worker")
    args.append(f"pin_memory={config.pin_memory}")
    if collate_fn:
        args.append(f"collate_fn={collate_fn}")
    if drop_last:
        args.append("drop_last=True")
    return args


def to_python(
    config: LoaderConfig,
    *,
    dataset: str = "dataset",
    collate_fn: str | None = None,
    shuffle: bool = False,
    drop_last: bool = False,
    comment: str | None = None,
) -> str:
    """Python that builds the loader: ``loader = DataLoader(...)`` with imports.

    ``dataset`` and ``collate_fn`` are the names the code refers to. A config
    with ``batched_fetch`` needs stallscope's batched fetching, so the code
    calls ``ss.make_loader`` with the config instead of ``DataLoader``.
    """
    lines = [f"# {line}" for line in (comment or "").splitlines() if line.strip()]
    lines += ["import torch"] if config.torch_threads is not None else []
    lines += ["from torch.utils.data import DataLoader", "", "import stallscope as ss", ""]
    if config.torch_threads is not None:
        lines += [f"torch.set_num_threads({config.torch_threads})  # main-process intra-op threads", ""]
    if config.batched_fetch:
        fields = ", ".join(f"{k}={v!r}" for k, v in config.to_dict().items() if k != "torch_threads")
        call = ["loader = ss.make_loader(", f"    {dataset},", f"    config=ss.LoaderConfig({fields}),"]
        if shuffle:
            call.append("    shuffle=True,")
        if drop_last:
            call.append("    drop_last=True,")
        if collate_fn:
            call.append(f"    collate_fn={collate_fn},")
        lines += ["# batched_fetch: one indexing call per batch (stallscope.pipeline.batching)", *call, ")"]
        return "\n".join(lines) + "\n"
    args = _arguments(config, dataset=dataset, collate_fn=collate_fn, shuffle=shuffle, drop_last=drop_last)
    lines += ["loader = DataLoader(", *[f"    {a}," for a in args], ")"]
    return "\n".join(lines) + "\n"
