"""``stallscope report NEW.json --against OLD.json``: two saved records side by side. Pure
functions.

Two records of the same command, taken at different times, each figure with the noise
its own record states (a bench result's min-max over repeats, a compare ratio's
interval). A difference is "inside the noise" when the two ranges overlap: records
taken minutes apart on a shared machine differ by 10-30% for reasons that are not the
change (NOTE [paired comparison] in comparison.py: ``compare`` is the way to measure a
change). Figures without a stated noise are marked so, never judged. Warnings name what
makes the records incomparable: host, torch version, knobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from ..record.model import baseline_of, best_of, results_of
from .attach import attach_facts, wilson_interval
from .readers import number

INSIDE, BEYOND, UNKNOWN, ONLY_ONE = (
    "inside noise",
    "beyond noise",
    "noise not stated",
    "in one record only",
)

# Host facts whose difference makes figures incomparable.
HOST_KEYS = ("cores", "logical_cpus", "memory_bytes", "gpu", "cuda", "platform", "python")


def _figure(
    key: str, title: str, value: Any, low: Any = None, high: Any = None, unit: str = ""
) -> dict[str, Any]:
    return {
        "key": key,
        "title": title,
        "value": number(value),
        "low": number(low),
        "high": number(high),
        "unit": unit,
    }


def record_figures(r: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The comparable figures a record holds, each with its own noise range where it states one."""
    for result in results_of(r):
        rate = result.samples_per_s
        if rate is not None and not rate.scalar and not result.error:
            label = result.label or str(result.config if result.has("config") else None)
            yield _figure(
                f"bench:{label}",
                f"samples/s at {label}",
                rate.median,
                rate.min,
                rate.max,
                "samples/s",
            )
            if result.batch_ms is not None and result.batch_ms.p95 is not None:
                yield _figure(
                    f"bench-p95:{label}",
                    f"batch wait p95 at {label}",
                    result.batch_ms.p95,
                    unit="ms",
                )
    for key, entry in (("baseline", baseline_of(r)), ("best", best_of(r))):
        if entry is not None and entry.samples_per_s is not None:
            yield _figure(
                f"tune:{key}", f"tuned {key} samples/s", entry.samples_per_s, unit="samples/s"
            )
    for stage in r.get("stages") or []:
        if isinstance(stage, dict) and number(stage.get("ms_per_sample")) is not None:
            yield _figure(
                f"stage:{stage.get('name')}",
                f"stage {stage.get('name')}",
                stage["ms_per_sample"],
                unit="ms",
            )
    if number(r.get("stall_fraction")) is not None:
        yield _figure("profile:stall", "data-stall fraction", r["stall_fraction"], unit="fraction")
    ratio = r.get("ratio")
    if isinstance(ratio, dict) and number(ratio.get("estimate")) is not None:
        yield _figure(
            "compare:ratio",
            "B/A samples/s",
            ratio["estimate"],
            ratio.get("low"),
            ratio.get("high"),
            "ratio",
        )
    attach = attach_facts(r)
    if attach is not None and attach.data_wait_fraction is not None and attach.interval:
        low, high = attach.interval
        yield _figure(
            "attach:data-wait",
            "training thread's data-wait fraction",
            attach.data_wait_fraction,
            low,
            high,
            "fraction",
        )
        busy = sum(stage.samples for stage in attach.stages)
        for stage in attach.stages:
            low, high = wilson_interval(stage.samples, busy) or (0.0, 1.0)
            yield _figure(
                f"attach-stage:{stage.name}",
                f"workers' share in {stage.name}",
                stage.share,
                low,
                high,
                "fraction",
            )


def judge(new: dict[str, Any] | None, old: dict[str, Any] | None) -> str:
    """Whether a figure's change is inside the noise both records state (their ranges overlap)."""
    if new is None or old is None or new["value"] is None or old["value"] is None:
        return ONLY_ONE
    if None in (new["low"], new["high"], old["low"], old["high"]):
        return UNKNOWN
    return INSIDE if new["low"] <= old["high"] and old["low"] <= new["high"] else BEYOND


def record_knobs(r: dict[str, Any]) -> dict[str, Any]:
    """The loader settings a record ran at, where it names one config (the rest differ per row)."""
    knobs: dict[str, Any] = {}
    if isinstance(r.get("loader"), dict):
        knobs["loader"] = r["loader"]
    for key in ("a", "b"):
        if isinstance(r.get(key), dict) and "config" in r[key]:
            knobs[key] = r[key]["config"]
    baseline = baseline_of(r)
    if baseline is not None:
        knobs["baseline"] = baseline.config if baseline.has("config") else None
    configs = sorted(str(res.label) for res in results_of(r))
    if configs:
        knobs["grid"] = configs
    return knobs


def warnings(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """What makes the two records incomparable, one sentence each."""
    out = []
    hn, ho = new.get("host") or {}, old.get("host") or {}
    changed = [k for k in HOST_KEYS if k in hn and k in ho and hn[k] != ho[k]]
    if changed:
        out.append(
            "The hosts differ ("
            + ", ".join(f"{k}: {ho[k]} then, {hn[k]} now" for k in changed)
            + ")."
        )
    if hn.get("torch") != ho.get("torch"):
        out.append(f"The torch versions differ ({ho.get('torch')} then, {hn.get('torch')} now).")
    if new.get("target") != old.get("target"):
        out.append(f"The targets differ ({old.get('target')} then, {new.get('target')} now).")
    kn, ko = record_knobs(new), record_knobs(old)
    differing = sorted(k for k in set(kn) | set(ko) if kn.get(k) != ko.get(k))
    if differing:
        out.append(
            "The knobs differ ("
            + ", ".join(differing)
            + "): a difference may come from the settings."
        )
    return out


def against_facts(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """Side by side: ``{command, rows: [{key, title, unit, new, old, ratio, judged}], warnings,
    counts}``."""
    new_figures = {f["key"]: f for f in record_figures(new)}
    old_figures = {f["key"]: f for f in record_figures(old)}
    rows = []
    for key in list(new_figures) + [k for k in old_figures if k not in new_figures]:
        n, o = new_figures.get(key), old_figures.get(key)
        either = cast("dict[str, Any]", n or o)  # each key comes from one record or the other
        ratio = None
        if n and o and n["value"] is not None and o["value"] and o["value"] > 0:
            ratio = n["value"] / o["value"]
        rows.append(
            {
                "key": key,
                "title": either["title"],
                "unit": either["unit"],
                "new": n,
                "old": o,
                "ratio": ratio,
                "judged": judge(n, o),
            }
        )
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["judged"]] = counts.get(row["judged"], 0) + 1
    return {
        "command": new.get("command"),
        "rows": rows,
        "warnings": warnings(new, old),
        "counts": counts,
    }
