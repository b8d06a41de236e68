"""A watch's figures across ranks under ``torchrun`` (SPEC §3.5): each rank measures, all of them
see every rank.

:func:`exchange` is the collective (every rank calls it, through
``Watch.gather()``): each rank sends a small summary of its own profile
(``runtime.distributed.rank_entry``: no timelines, a few numbers per time
window) and receives every rank's. :func:`distributed_section` puts the
gathered summaries into the profile's ``ranks`` and ``rank`` entries; comparing
them (the maximum exposed data wait across ranks, the slowest rank overall and per
time window) is analysis (``analysis.training.judged_profile``).
"""

from __future__ import annotations

from typing import Any

from ..runtime.distributed import gather_to_all, rank_entry, rank_info


def exchange(profile: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's summary of its ``profile`` section, in rank order (a collective: call it on
    every rank).

    Outside a distributed job: this process's summary alone.
    """
    return gather_to_all(rank_entry(profile, rank_info()))


def current_rank() -> int | None:
    """This process's rank under torchrun (None outside a distributed job)."""
    info = rank_info()
    return info.rank if info.is_distributed else None


def distributed_section(ranks: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The profile's ``ranks`` and ``rank`` (only with ranks) entries, in that order."""
    section: dict[str, Any] = {"ranks": ranks}
    if ranks:
        section["rank"] = rank_info().rank
    return section
