"""Console summary of a bench record: one table, the verdict's config marked, noise stated."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from ..analysis.invariants import ran_label
from ..analysis.readers import steady_config
from ..analysis.run_verdict import decide
from ..analysis.sections import delivered_to
from ..analysis.sweep_epochs import best_result, sweep_epochs
from ..errors import not_tried
from ..record.model import BatchMs
from ..record.sections import BenchSection, Scaling
from .console_table import titled_table
from .report_format import fmt_fixed, fmt_rate, fmt_rate_cell


def render_bench(data: dict[str, Any], console: Console) -> None:
    bench = BenchSection.from_dict(data)
    results = bench.typed_results()
    if not results:
        return
    scaling = bench.scaling or Scaling()
    # ★ marks the verdict's config (NOTE [one verdict]) where the sweep measured it.
    chosen = decide(data).config
    steady = steady_config(chosen)
    star = next(
        (
            i
            for i, r in enumerate(results)
            if chosen is not None and steady_config(r.config) == steady
        ),
        None,
    )
    gpu = delivered_to(data)
    delivery = f", each batch copied to the GPU ({escape(gpu)})" if gpu else ""
    tokens = any(r.tokens_per_s for r in results)  # token batches: tokens/s beside samples/s
    headers = [
        "config",
        "samples/s",
        "range",
        *(["tokens/s"] if tokens else []),
        "batches/s",
        "start-up s",
        "batch ms p50",
        "p95",
        "p99",
        "speed-up",
        "efficiency",
        "workers CPU %",
    ]
    table = titled_table(
        f"DataLoader throughput (steady state{delivery}; start-up reported separately)",
        headers,
        "l" + "r" * (len(headers) - 1),
    )
    for i, r in enumerate(results):
        if r.error or r.samples_per_s is None or r.samples_per_s.scalar:
            # A configuration that failed (the schema allows it; a record may come from elsewhere).
            table.add_row(
                "  " + escape(r.label or "?"),
                "not tried" if not_tried(r.error) else "[red]failed[/]",
                *["–"] * (len(table.columns) - 2),
            )
            continue
        rate = r.samples_per_s
        res = r.resources or {}
        copies = bool(r.duplicates)
        style = "bold green" if i == star else ("yellow" if copies else None)
        latency = r.batch_ms or BatchMs()
        table.add_row(
            ("★ " if i == star else "⚠ " if copies else "  ")
            + escape(ran_label(data, r.config, r.label)),
            # Rates at three significant figures, as the verdict and the documents write them: a
            # range of two five-digit rates then fits its column at 140 columns.
            fmt_rate_cell(rate.median),
            f"{fmt_rate_cell(rate.min)}–{fmt_rate_cell(rate.max)}",
            *([fmt_rate_cell(r.tokens_per_s.median if r.tokens_per_s else None)] if tokens else []),
            fmt_rate_cell(r.batches_per_s.median if r.batches_per_s else None),
            fmt_fixed(r.startup_s, 2),
            fmt_fixed(latency.p50, 2),
            fmt_fixed(latency.p95, 2),
            fmt_fixed(latency.p99, 2),
            "copies" if copies else "–" if r.speedup is None else f"{r.speedup:.2f}×",
            "–" if r.efficiency is None else f"{r.efficiency * 100:.0f}%",
            fmt_fixed(res.get("workers_cpu_percent"), 0) if res else "–",
            style=style,
        )
    console.print(table)
    for r in results:
        if r.error:
            # Why a config failed, one sentence each (NOTE [failed configs] in throughput/sweep.py).
            label = ran_label(data, r.config, r.label)
            if not_tried(r.error):
                console.print(f"· {escape(label)} {escape(r.error)}")
            else:
                console.print(f"[red]✖ {escape(label)} failed:[/] {escape(r.error)}")
    whole = [
        ran_label(data, r.config, r.label) for r in results if r.startup_included and not r.error
    ]
    if whole:
        console.print(
            f"Start-up included at {escape(', '.join(whole))}: its epochs end before its workers' "
            "first batches are used up, so it has no steady state apart from start-up."
        )
    marked = next((r.duplicates for r in results if r.duplicates), None)
    if marked:
        console.print(
            f"[yellow]⚠ duplicates:[/] {marked['note']} (check code iterable-duplicates)."
        )
    best = best_result(data)
    epochs = sweep_epochs(data)  # where the rate per epoch decided the sweep's fastest
    if best is not None and best.rate is not None:
        # The fastest row of the sweep, said as such (per epoch where that rate decided it:
        # sweep_epochs.py): the verdict decides what to use.
        how = [f"median of {best.repeats} repeats"] if best.repeats is not None else []
        how += [f"spread {best.noise * 100:.0f}%"] if best.noise is not None else []
        tokens_per_s = best.tokens_per_s.median if best.tokens_per_s else None
        per_epoch = epochs.rate_of(best.config) if epochs is not None else None
        rate_text = (
            f"{fmt_rate(per_epoch)} samples/s per epoch ({fmt_rate(best.rate)} in steady state)"
            if per_epoch is not None
            else f"{fmt_rate(best.rate)} samples/s"
        )
        console.print(
            f"Fastest in the sweep{' per epoch, start-ups included' if per_epoch else ''}: [bold]"
            f"{escape(ran_label(data, best.config, best.label))}[/] at {rate_text}"
            + (f" ({tokens_per_s:,.0f} tokens/s)" if tokens_per_s is not None else "")
            + (f" ({', '.join(how)})" if how else "")
            + "."
        )
    dataset = data.get("dataset") or {}
    sizes = dataset.get("batch_sizes")
    if dataset.get("batching") == "batch_sampler" and sizes:
        console.print(
            f"Batches come from your batch_sampler: {sizes['min']:,}–{sizes['max']:,} samples each "
            f"(mean {sizes['mean']:,.1f}, the bs= in the labels); samples are counted as each "
            "batch holds them."
        )
    per_sample = scaling.single_process_ms_per_sample
    if per_sample:
        line = f"Single-process cost: {per_sample:.2f} ms/sample on {scaling.cores} usable core(s)"
        plateau = scaling.plateau_workers
        if plateau is not None and epochs is None:  # a steady-state plateau
            line += f"; throughput plateaus from num_workers={plateau}"
        console.print(line + ".")
