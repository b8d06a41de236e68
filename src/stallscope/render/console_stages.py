"""Console summary of a ``stages`` record: the stage table, augmentation, transfer, hot spots.

Reads only the record (``RunRecord`` or its dict); every sentence is built from its numbers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from ..record import RunRecord
from ..record.model import Hotspot, Stage, hotspots_of, stages_of
from ..text import plural
from .report_format import fmt_bytes

_BAR_WIDTH = 24


def _as_dict(record: RunRecord | Mapping[str, Any]) -> Mapping[str, Any]:
    return record.to_dict() if isinstance(record, RunRecord) else record


def short_path(path: str, line: int | None = None) -> str:
    """``file:line`` with site-packages and the working directory trimmed off."""
    if path == "<built-in>":
        return path
    marker = f"site-packages{os.sep}"
    if marker in path:
        path = path.split(marker, 1)[1]
    else:
        try:
            relative = os.path.relpath(path)
            if not relative.startswith(".."):
                path = relative
        except ValueError:
            pass
    return f"{path}:{line}" if line else path


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


class StagesSummary:
    """Prints the ``stages`` section of a record to a rich console (``render.console`` chooses
    it)."""

    def print(self, record: RunRecord | Mapping[str, Any], console: Console) -> None:
        data = _as_dict(record)
        stages = stages_of(data)
        if not stages:
            console.print("no stage times were measured.")
            return
        console.print(self._heading(data))
        console.print(self._stage_table(stages))
        for line in self._summary_lines(data):
            console.print(line, highlight=False)
        hotspots = hotspots_of(data)
        if hotspots:
            console.print(self._hotspot_table(hotspots, data))
        for note in data.get("stage_notes") or []:
            console.print(f"[dim]note: {note}[/]", highlight=False)

    @staticmethod
    def _heading(data: Mapping[str, Any]) -> str:
        run = data.get("stage_run") or {}
        workers = run.get("num_workers", 0)
        where = "in the main process" if workers == 0 else f"in {plural(workers, 'worker')}"
        method = f" ({run['start_method']})" if run.get("start_method") and workers else ""
        device = f", copies to {run['device']}" if run.get("device") else ""
        samples, batches, size = run.get("samples", 0), run.get("batches", 0), run.get("batch_size")
        if isinstance(size, int) and samples < batches * size:
            size = f"up to {size}"  # an epoch's last batch is short
        return (
            f"[bold]Stage breakdown[/] of {data.get('target', '?')}: {samples} "
            f"samples ({batches} batches of {size or '?'}) measured {where}{method}{device}"
        )

    @staticmethod
    def _stage_table(stages: list[Stage]) -> Table:
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        table.add_column("stage")
        table.add_column("runs in")
        table.add_column("ms/sample", justify="right")
        table.add_column("share", justify="right")
        table.add_column("", no_wrap=True)
        top = max((s.share or 0.0) for s in stages) or 1.0
        for item in stages:
            share = item.share or 0.0
            name = item.name + (" [dim](random)[/]" if item.random else "")
            if item.parent:  # a call broken out of "other (__getitem__)"
                name = f"  └ {name}"
            bar = "█" * max(0, round(_BAR_WIDTH * share / top)) if share > 0 else ""
            doubtful = bool(item.doubtful)  # NOTE [stages add up] in breakdown/table.py
            table.add_row(
                name,
                item.where or "",
                "[yellow]doubtful[/]" if doubtful else _ms(item.ms_per_sample),
                "–" if doubtful else f"{100 * share:.1f}%",
                bar,
            )
        total = sum(s.ms_per_sample or 0.0 for s in stages if not s.doubtful)
        table.add_row("[bold]total[/]", "", f"[bold]{_ms(total)}[/]", "100.0%", "")
        return table

    @staticmethod
    def _summary_lines(data: Mapping[str, Any]) -> list[str]:
        lines: list[str] = []
        stages = stages_of(data)
        trusted = [s for s in stages if not s.doubtful] or stages
        largest = max(trusted, key=lambda s: s.ms_per_sample or 0.0)
        lines.append(
            f"Largest stage: [bold]{largest.name}[/], {_ms(largest.ms_per_sample)} ms per "
            f"sample ({100 * (largest.share or 0.0):.0f}% of the time)."
        )
        for item in stages:
            if item.doubtful:
                lines.append(f"[yellow]{item.name} is doubtful[/], not counted: {item.doubtful}.")
        run = data.get("stage_run") or {}
        if run.get("stage_ms_per_batch") is not None and run.get("batch_interval_ms"):
            # The stages a graph or pool pipeline declares (NOTE [declared stages]).
            between = run.get("between_ms_per_batch")
            lines.append(
                f"Per batch the declared stages take {_ms(run['stage_ms_per_batch'])} ms of the "
                f"{_ms(run['batch_interval_ms'])} ms measured between batches "
                f"({100 * (run.get('adds_up') or 0.0):.0f}%; each instant shared among the stages "
                "running at it)"
                + (
                    f", and {_ms(between)} ms passed with none of them running (the hand-over "
                    "between stages: queues, pickling to and from worker processes, the "
                    "pipeline's own code)"
                    if between is not None
                    else ""
                )
                + (
                    f"; the main thread waited {_ms(run['main_wait_ms_per_batch'])} ms per batch "
                    "for other threads or processes."
                    if run.get("main_wait_ms_per_batch") is not None
                    else "."
                )
            )
        aug = data.get("augmentation_overhead")
        if aug:
            names = ", ".join(aug.get("transforms") or [])
            how = "detected as random" if aug.get("source") == "detected" else "as given"
            line = (
                f"Augmentation ({names}; {how}): {_ms(aug['ms_per_sample'])} ms per sample, "
                f"+{aug['percent']:.0f}% over the pipeline without them."
                if aug.get("percent") is not None
                else f"Augmentation ({names}; {how}): {_ms(aug['ms_per_sample'])} ms per sample."
            )
            if (
                aug.get("with_ms_per_sample") is not None
                and aug.get("without_ms_per_sample") is not None
            ):
                diff = aug.get("differential_ms_per_sample") or 0.0
                pct = aug.get("differential_percent")
                line += (
                    " With vs without them, __getitem__ in-process: "
                    f"{_ms(aug['with_ms_per_sample'])} vs {_ms(aug['without_ms_per_sample'])} ms "
                    f"({diff:+.2f} ms" + (f", {pct:+.0f}%)." if pct is not None else ").")
                )
            lines.append(line)
        transfer = data.get("transfer")
        if transfer:
            payload = int(transfer.get("batch_bytes") or 0)
            size = f"{fmt_bytes(payload)} of tensors and arrays" if payload else "no array in it"
            lines.append(
                f"Worker→main transfer per batch ({size}): serialise "
                f"{_ms(transfer.get('serialise_ms_per_batch'))} ms, queue "
                f"{_ms(transfer.get('queue_ms_per_batch'))} ms, deserialise "
                f"{_ms(transfer.get('deserialise_ms_per_batch'))} ms (plus "
                f"{_ms(transfer.get('handoff_ms_per_batch'))} ms waiting for the worker's queue "
                "thread"
                + (
                    f" and {_ms(transfer['deserialise_wait_ms_per_batch'])} ms waiting for the "
                    "worker to hand over shared memory"
                    if transfer.get("deserialise_wait_ms_per_batch")
                    else ""
                )
                + ", overlapped with its next batch)."
            )
        storage = data.get("storage")
        if storage:
            lines.append(
                f"Page cache ({storage['files']} files, {fmt_bytes(storage['bytes'])}): warm "
                f"{_ms(storage['warm_ms_per_sample'])} ms, cold "
                f"{_ms(storage['cold_ms_per_sample'])} ms per sample → fetching from storage "
                f"{_ms(storage['fetch_ms_per_sample'])} ms ({100 * storage['fetch_share']:.0f}%), "
                f"preparation on the CPU {_ms(storage['prepare_ms_per_sample'])} ms."
            )
        return lines

    @staticmethod
    def _hotspot_table(hotspots: list[Hotspot], data: Mapping[str, Any]) -> Table:
        table = Table(
            title="__getitem__ hot spots (cProfile, in-process, by own time)",
            title_justify="left",
            show_edge=False,
            pad_edge=False,
            box=None,
            header_style="bold",
        )
        table.add_column("function", overflow="fold")
        table.add_column("where", overflow="fold")
        table.add_column("calls", justify="right")
        table.add_column("own ms", justify="right")
        table.add_column("cum ms", justify="right")
        table.add_column("ms/sample", justify="right")
        for spot in hotspots:
            table.add_row(
                spot.function,
                short_path(spot.file, spot.line or 0),
                str(spot.calls),
                _ms(spot.total_ms),
                _ms(spot.cumulative_ms),
                _ms(spot.ms_per_sample),
            )
        return table


def render_stages(record: RunRecord | Mapping[str, Any], console: Console) -> None:
    StagesSummary().print(record, console)
