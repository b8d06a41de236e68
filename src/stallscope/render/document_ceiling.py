"""The report section "This machine's ceiling": the ceiling, the cores needed at a target rate and
the training step with free data, in the sentences ``analysis/ceiling.py`` builds, with their
figures."""

from __future__ import annotations

from typing import Any

from . import document_model as dm
from . import report_format as rf


def ceiling_section(facts: Any, r: dict[str, Any]) -> tuple[dm.Section | None, dm.Text | None]:
    blocks: list[dm.Block] = []
    headline: dm.Text | None = None
    ceiling, cores = facts.ceiling, facts.cores_needed
    if facts.ceiling_sentence:
        blocks.append(dm.Paragraph([facts.ceiling_sentence]))
        headline = [dm.Strong("Ceiling:"), " ", facts.ceiling_sentence]
    if facts.cores_sentence:
        blocks.append(dm.Paragraph([facts.cores_sentence]))
        if headline is None:
            headline = [dm.Strong("Cores needed:"), " ", facts.cores_sentence]
    if facts.free_data_sentence:
        blocks.append(dm.Paragraph([facts.free_data_sentence]))
    rows: list[list[dm.Cell]] = []
    if ceiling is not None:
        rows.append(
            [
                "CPU ceiling (usable cores ÷ CPU per sample)",
                f"{rf.fmt_rate(ceiling.get('cpu_samples_per_s'))} samples/s",
            ]
        )
        if ceiling.get("main_process_samples_per_s") is not None:
            rows.append(
                [
                    "main-process ceiling (batch size ÷ receive CPU per batch)",
                    f"{rf.fmt_rate(ceiling['main_process_samples_per_s'])} samples/s",
                ]
            )
        if ceiling.get("basis") == "saturated":
            rows.append(
                [
                    "the pick's own windows (usable cores busy)",
                    f"{ceiling.get('pick_cpu_cores')} of {ceiling.get('usable_cores')}",
                ]
            )
        if ceiling.get("basis") == "one-process":
            rows.append(
                [
                    "one-process ceiling (1 ÷ CPU per sample, nothing to receive)",
                    f"{rf.fmt_rate(ceiling.get('one_process_samples_per_s'))} samples/s",
                ]
            )
        rows.append(
            [
                f"ceiling ({ceiling.get('basis')})",
                f"{rf.fmt_rate(ceiling['samples_per_s'])} samples/s",
            ]
        )
        rows.append(["pick's share of it", rf.fmt_fraction(ceiling["pick_fraction"])])
    if cores is not None:
        rows.append(
            [
                "cores needed at " + f"{rf.fmt_rate(cores['target_rate'])} samples/s",
                f"{cores['cores']:,.1f} (usable: {cores.get('usable_cores')})",
            ]
        )
    if rows:
        blocks.append(dm.Table(["figure", "value"], rows, align="lr"))
    if not blocks:
        return None, None
    return dm.Section("ceiling", "This machine's ceiling", blocks), headline
