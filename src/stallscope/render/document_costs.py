"""Report sections on what a configuration costs: epoch time, in-flight memory, CPU."""

from __future__ import annotations

from typing import Any

from ..analysis import CpuUse, EpochEstimate, EpochRow, MemoryFacts
from . import document_model as dm
from . import report_format as rf


# -- epoch -------------------------------------------------------------------------------
def epoch_section(epoch: EpochEstimate, r: dict[str, Any]) -> tuple[dm.Section, dm.Text | None]:
    blocks: list[dm.Block] = [
        dm.Paragraph(
            [
                f"For an epoch of {rf.fmt_count(epoch.length)} samples (the dataset's length) at "
                "the measured steady-state rates:"
            ]
        ),
        dm.table(
            epoch.rows,
            [
                dm.Column("Configuration", lambda row: dm.Code(row.label)),
                dm.Column("role", lambda row: row.role),
                dm.Column("samples/s", lambda row: rf.fmt_rate(row.samples_per_s), "r"),
                dm.Column("epoch time", lambda row: rf.fmt_seconds(row.seconds), "r"),
                dm.Column("batches", lambda row: rf.fmt_count(row.batches), "r"),
                dm.Column("worker start-up", _startup, "r"),
            ],
        ),
    ]
    best = epoch.rows[0]
    notes: dm.Text = []
    if epoch.saving_s is not None and len(epoch.rows) > 1:
        notes += [
            dm.config_code(best.label),
            f" saves about {rf.fmt_seconds(epoch.saving_s)} per epoch against ",
            dm.config_code(epoch.rows[1].label),
            ".",
        ]
    if best.startup_s is not None and not best.persistent and best.seconds > 0:
        notes.append(
            f" Without persistent_workers each epoch also pays {rf.fmt_seconds(best.startup_s)} of "
            f"worker start-up ({rf.fmt_fraction(best.startup_s / best.seconds)} of the epoch)."
        )
    if notes:
        blocks.append(dm.Paragraph(notes))
    headline: dm.Text = [
        f"One epoch of {rf.fmt_count(epoch.length)} samples takes about "
        f"{rf.fmt_seconds(best.seconds)} with ",
        dm.config_code(best.label),
    ]
    if len(epoch.rows) > 1:
        headline += [
            f" against {rf.fmt_seconds(epoch.rows[1].seconds)} with ",
            dm.config_code(epoch.rows[1].label),
        ]
    headline.append(".")
    return dm.Section("epoch", "Estimated epoch time", blocks), headline


def _startup(row: EpochRow) -> str:
    """The workers' start-up, paid once with persistent workers and every epoch without."""
    if row.startup_s is None:
        return rf.DASH
    return rf.fmt_seconds(row.startup_s) + (" once" if row.persistent else " per epoch")


# -- memory -------------------------------------------------------------------------------
def memory_section(memory: MemoryFacts, r: dict[str, Any]) -> tuple[dm.Section, dm.Text | None]:
    blocks: list[dm.Block] = []
    ref = f"One collated batch measured {rf.fmt_bytes(memory.reference_batch_bytes)}"
    if memory.reference_batch_size:
        ref += f" at batch size {memory.reference_batch_size}"
    blocks.append(dm.Paragraph([ref + "."]))
    for row in memory.rows:
        parts: dm.Text = [
            "At ",
            dm.config_code(row.label),
            f", {row.workers} workers × prefetch_factor {row.prefetch_factor} = "
            f"{row.in_flight_batches} batches of {rf.fmt_bytes(row.batch_bytes)} are in flight: "
            f"{rf.fmt_bytes(row.in_flight_bytes)}",
        ]
        if row.shm_fraction is not None:
            parts.append(
                f", {rf.fmt_fraction(row.shm_fraction)} of the "
                f"{rf.fmt_bytes(memory.shm_free_bytes)} free in /dev/shm"
            )
        parts.append(".")
        if row.workers_rss_bytes is not None:
            parts.append(
                f" With the workers' {rf.fmt_bytes(row.workers_rss_bytes)} resident memory that is "
                f"{rf.fmt_bytes(row.ram_needed_bytes)}"
            )
            if row.ram_fraction is not None:
                parts.append(
                    f", {rf.fmt_fraction(row.ram_fraction)} of the "
                    f"{rf.fmt_bytes(memory.ram_available_bytes)} of RAM available"
                )
            parts.append(".")
        blocks.append(dm.Paragraph(parts))
    blocks.append(
        dm.table(
            memory.rows,
            [
                dm.Column("Configuration", lambda row: dm.Code(row.label)),
                dm.Column("role", lambda row: row.role),
                dm.Column(
                    "workers × prefetch", lambda row: f"{row.workers} × {row.prefetch_factor}", "r"
                ),
                dm.Column("batch", lambda row: rf.fmt_bytes(row.batch_bytes), "r"),
                dm.Column("in flight", lambda row: rf.fmt_bytes(row.in_flight_bytes), "r"),
                dm.Column("of free /dev/shm", lambda row: rf.fmt_fraction(row.shm_fraction), "r"),
                dm.Column("workers RSS", lambda row: rf.fmt_bytes(row.workers_rss_bytes), "r"),
                dm.Column("of available RAM", lambda row: rf.fmt_fraction(row.ram_fraction), "r"),
            ],
        )
    )
    first = memory.rows[0]
    headline: dm.Text = [
        "In-flight batches at ",
        dm.config_code(first.label),
        f": {rf.fmt_bytes(first.in_flight_bytes)}",
    ]
    if first.shm_fraction is not None:
        headline.append(f", {rf.fmt_fraction(first.shm_fraction)} of free /dev/shm")
    headline.append(".")
    return dm.Section("memory", "Memory budget of in-flight batches", blocks), headline


# -- CPU -------------------------------------------------------------------------------------
def cpu_section(cpu: CpuUse, r: dict[str, Any]) -> tuple[dm.Section, dm.Text | None]:
    f = cpu.focus
    where: dm.Text = [
        "In the training loop" if f.label == "training loop" else "At ",
        *([] if f.label == "training loop" else [dm.config_code(f.label)]),
    ]
    text = f" the main process used {rf.fmt_percent(f.main_percent)} of a core"
    if f.workers:
        text += f" and the {f.workers} workers {rf.fmt_percent(f.workers_percent)} together"
        text += f": {rf.fmt_percent(f.total_percent)} of one core in all"
    if f.capacity_fraction is not None:
        text += f", {rf.fmt_fraction(f.capacity_fraction)} of the {cpu.cores} usable cores"
    blocks: list[dm.Block] = [dm.Paragraph([*where, text + "."])]
    blocks.append(
        dm.table(
            cpu.rows,
            [
                dm.Column(
                    "Configuration",
                    lambda row: row.label if row.label == "training loop" else dm.Code(row.label),
                ),
                dm.Column("main CPU", lambda row: rf.fmt_percent(row.main_percent), "r"),
                dm.Column("workers CPU", lambda row: rf.fmt_percent(row.workers_percent), "r"),
                dm.Column(
                    "of usable cores", lambda row: rf.fmt_fraction(row.capacity_fraction), "r"
                ),
                dm.Column("main RSS", lambda row: rf.fmt_mib(row.main_rss_mb), "r"),
                dm.Column("workers RSS", lambda row: rf.fmt_mib(row.workers_rss_mb), "r"),
                dm.Column("worker USS", lambda row: rf.fmt_mib(row.worker_uss_mb), "r"),
            ],
        )
    )
    headline: dm.Text | None = None
    if f.capacity_fraction is not None:
        keeps: dm.Text = [] if f.label == "training loop" else [dm.config_code(f.label), " keeps "]
        headline = [
            "CPU: ",
            *keeps,
            f"{rf.fmt_fraction(f.capacity_fraction)} of the {cpu.cores} usable cores busy.",
        ]
    return dm.Section("cpu", "CPU use", blocks), headline
