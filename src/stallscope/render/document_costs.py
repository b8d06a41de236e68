"""Report sections on what a configuration costs: epoch time, in-flight memory, CPU."""

from __future__ import annotations

from ..analysis import ReportFacts
from .document_model import (
    Code,
    Paragraph,
    Section,
    Table,
    config_code,
)
from .report_format import (
    DASH,
    fmt_bytes,
    fmt_count,
    fmt_fraction,
    fmt_mib,
    fmt_percent,
    fmt_rate,
    fmt_seconds,
)


# -- epoch -------------------------------------------------------------------------------
def epoch_section(facts: ReportFacts, r: dict):
    epoch = facts.epoch
    if epoch is None:
        return None, None
    rows = []
    for row in epoch.rows:
        start = DASH
        if row.startup_s is not None:
            start = f"{fmt_seconds(row.startup_s)}" + (" once" if row.persistent else " per epoch")
        rows.append([Code(row.label), row.role, fmt_rate(row.samples_per_s), fmt_seconds(row.seconds),
                     fmt_count(row.batches), start])
    blocks: list = [
        Paragraph([f"For an epoch of {fmt_count(epoch.length)} samples (the dataset's length) at the measured "
                   "steady-state rates:"]),
        Table(["Configuration", "role", "samples/s", "epoch time", "batches", "worker start-up"], rows, "llrrrr"),
    ]
    best = epoch.rows[0]
    notes: list = []
    if epoch.saving_s is not None and len(epoch.rows) > 1:
        notes += [config_code(best.label), f" saves about {fmt_seconds(epoch.saving_s)} per epoch against ",
                  config_code(epoch.rows[1].label), "."]
    if best.startup_s is not None and not best.persistent and best.seconds > 0:
        notes.append(f" Without persistent_workers each epoch also pays {fmt_seconds(best.startup_s)} of worker "
                     f"start-up ({fmt_fraction(best.startup_s / best.seconds)} of the epoch).")
    if notes:
        blocks.append(Paragraph(notes))
    headline: list = [f"One epoch of {fmt_count(epoch.length)} samples takes about {fmt_seconds(best.seconds)} with ",
                      config_code(best.label)]
    if len(epoch.rows) > 1:
        headline += [f" against {fmt_seconds(epoch.rows[1].seconds)} with ", config_code(epoch.rows[1].label)]
    headline.append(".")
    return Section("epoch", "Estimated epoch time", blocks), headline


# -- memory -------------------------------------------------------------------------------
def memory_section(facts: ReportFacts, r: dict):
    memory = facts.memory
    if memory is None:
        return None, None
    blocks: list = []
    ref = f"One collated batch measured {fmt_bytes(memory.reference_batch_bytes)}"
    if memory.reference_batch_size:
        ref += f" at batch size {memory.reference_batch_size}"
    blocks.append(Paragraph([ref + "."]))
    for row in memory.rows:
        parts: list = ["At ", config_code(row.label), f", {row.workers} workers × prefetch_factor {row.prefetch_factor} = "
                       f"{row.in_flight_batches} batches of {fmt_bytes(row.batch_bytes)} are in flight: "
                       f"{fmt_bytes(row.in_flight_bytes)}"]
        if row.shm_fraction is not None:
            parts.append(f", {fmt_fraction(row.shm_fraction)} of the {fmt_bytes(memory.shm_free_bytes)} free in "
                         "/dev/shm")
        parts.append(".")
        if row.workers_rss_bytes is not None:
            parts.append(f" With the workers' {fmt_bytes(row.workers_rss_bytes)} resident memory that is "
                         f"{fmt_bytes(row.ram_needed_bytes)}")
            if row.ram_fraction is not None:
                parts.append(f", {fmt_fraction(row.ram_fraction)} of the {fmt_bytes(memory.ram_available_bytes)} "
                             "of RAM available")
            parts.append(".")
        blocks.append(Paragraph(parts))
    rows = [[Code(row.label), row.role, f"{row.workers} × {row.prefetch_factor}", fmt_bytes(row.batch_bytes),
             fmt_bytes(row.in_flight_bytes), fmt_fraction(row.shm_fraction), fmt_bytes(row.workers_rss_bytes),
             fmt_fraction(row.ram_fraction)] for row in memory.rows]
    blocks.append(Table(["Configuration", "role", "workers × prefetch", "batch", "in flight", "of free /dev/shm",
                         "workers RSS", "of available RAM"], rows, "llrrrrrr"))
    first = memory.rows[0]
    headline: list = ["In-flight batches at ", config_code(first.label), f": {fmt_bytes(first.in_flight_bytes)}"]
    if first.shm_fraction is not None:
        headline.append(f", {fmt_fraction(first.shm_fraction)} of free /dev/shm")
    headline.append(".")
    return Section("memory", "Memory budget of in-flight batches", blocks), headline


# -- CPU -------------------------------------------------------------------------------------
def cpu_section(facts: ReportFacts, r: dict):
    cpu = facts.cpu
    if cpu is None:
        return None, None
    f = cpu.focus
    where: list = ["In the training loop" if f.label == "training loop" else "At ", *([] if f.label == "training loop"
                                                                                     else [config_code(f.label)])]
    text = f" the main process used {fmt_percent(f.main_percent)} of a core"
    if f.workers:
        text += f" and the {f.workers} workers {fmt_percent(f.workers_percent)} together"
        text += f": {fmt_percent(f.total_percent)} of one core in all"
    if f.capacity_fraction is not None:
        text += f", {fmt_fraction(f.capacity_fraction)} of the {cpu.cores} usable cores"
    blocks: list = [Paragraph([*where, text + "."])]
    rows = [[row.label if row.label == "training loop" else Code(row.label), fmt_percent(row.main_percent), fmt_percent(row.workers_percent),
             fmt_fraction(row.capacity_fraction), fmt_mib(row.main_rss_mb), fmt_mib(row.workers_rss_mb),
             fmt_mib(row.worker_uss_mb)] for row in cpu.rows]
    blocks.append(Table(["Configuration", "main CPU", "workers CPU", "of usable cores", "main RSS", "workers RSS",
                         "worker USS"], rows, "lrrrrrr"))
    headline = None
    if f.capacity_fraction is not None:
        headline = ["CPU: ", *([] if f.label == "training loop" else [config_code(f.label), " keeps "]),
                    f"{fmt_fraction(f.capacity_fraction)} of the {cpu.cores} usable cores busy."]
    return Section("cpu", "CPU use", blocks), headline


