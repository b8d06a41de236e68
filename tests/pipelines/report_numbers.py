"""Check that every number printed in a report comes from its run record.

Used by the report tests (unit and e2e). A printed number is accepted when it is

- a token of a string in the record (labels, messages, versions), or
- a record value, or a value this file derives from the record by the
  formulas the report documents (epoch time = length / rate, and that plus
  the epoch-boundary gap without persistent workers; in-flight bytes = batch
  bytes × prefetch × workers, ...), recomputed here independently of
  stallscope.analysis, or a named target (analysis.TARGETS),
- printed under the report's formatting rules: unit conversions (×100 for
  percentages, ms/s/min/h, KiB/MiB/GiB) and rounding to the printed decimals;
  integers must match exactly unless the value is ≥ 100 (rates and times print
  without decimals from there).
"""

from __future__ import annotations

import bisect
import html
import math
import re
import statistics
import time
from typing import Any

TOKEN = re.compile(r"(?<![A-Za-z_\d.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?")
# The unit printed right after a number decides which values may explain it.
UNIT = re.compile(r"\s?(ms|min|h|s|B|KiB|MiB|GiB|TiB)(?![A-Za-z])|\s?(%|×)")
MIB = 1024 * 1024
BYTE_UNITS = {"B": 1.0, "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3, "TiB": 1024.0**4}
# Bulk series the report plots but never prints.
BULK_KEYS = {"batch_ms_histogram", "step_timeline", "samples_per_s_repeats", "epoch_start_s"}
# Version requirements our advice states in words ("in_order=False (torch >= 2.6)"): not figures.
VERSION_REQUIREMENT = re.compile(r"torch >= \d+\.\d+")


def tokens(text: str) -> list[str]:
    return [m.group(0) for m in TOKEN.finditer(text)]


def tokens_with_units(text: str) -> list[tuple[str, str]]:
    out = []
    for m in TOKEN.finditer(text):
        unit = UNIT.match(text, m.end())
        out.append((m.group(0), (unit.group(1) or unit.group(2)) if unit else ""))
    return out


def visible_html_text(page: str) -> str:
    """What a reader sees: no <style>, no tags (so no data: URIs), entities decoded."""
    page = re.sub(r"<style>.*?</style>", " ", page, flags=re.S)
    page = re.sub(r"<[^>]+>", " ", page)
    return html.unescape(page)


def markdown_text(text: str) -> str:
    """Markdown without link targets (plot paths)."""
    return re.sub(r"\]\([^)]*\)", "]", text)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def _rate(v: Any) -> float | None:
    return _num(v.get("median")) if isinstance(v, dict) else _num(v)


def _kind(path: tuple[str, ...]) -> str:
    """The unit a record value carries, from the key path: s, ms, bytes, mib or any."""
    last = path[-1] if path else ""
    if last.endswith("bytes"):
        return "bytes"
    if (
        last.endswith("_mb") or "_mb_" in last or last.startswith("mb_")
    ):  # mb_per_1000, mb_per_hour: MiB rates
        return "mib"
    if last.endswith("_s") or last.endswith("seconds"):
        return "s"
    if any(p == "ms" or p.endswith("_ms") or p.startswith("ms_") or "_ms_" in p for p in path):
        return "ms"
    return "any"


class Pools:
    """Candidate values by unit kind."""

    def __init__(self) -> None:
        self.kinds: dict[str, set[float]] = {
            "any": set(),
            "s": set(),
            "ms": set(),
            "bytes": set(),
            "mib": set(),
        }
        self.texts: set[str] = set()

    def add(self, kind: str, *values: float | None) -> None:
        for v in values:
            if v is not None and math.isfinite(v):
                self.kinds[kind].add(abs(float(v)))
                if kind != "any":
                    self.kinds["any"].add(abs(float(v)))


def _walk(value: Any, path: tuple[str, ...], pools: Pools) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if str(k).isdigit():  # numeric keys ("8": the ideal rate at 8 workers)
                pools.add("any", float(k))
            if str(k) not in BULK_KEYS:
                _walk(v, path + (str(k),), pools)
    elif isinstance(value, list):
        pools.add("any", float(len(value)))
        for v in value:
            _walk(v, path, pools)
    elif isinstance(value, str):
        for tok in tokens(value):
            pools.texts.add(tok.replace(",", ""))
    elif _num(value) is not None:
        pools.add(_kind(path), value)


def _configs(r: dict, *, trials: bool = True) -> list[tuple[dict, dict | None]]:
    """(config, bench result or None) for the configurations the record names."""
    out = [
        (res.get("config") or {}, res) for res in r.get("results") or [] if isinstance(res, dict)
    ]
    for key in ("best", "baseline"):
        if isinstance(r.get(key), dict):
            out.append((r[key].get("config") or {}, None))
    if trials:
        out += [(t.get("config") or {}, None) for t in r.get("trials") or [] if isinstance(t, dict)]
    if isinstance(r.get("config"), dict):
        out.append((r["config"], None))
    return out


def _derive(r: dict, pools: Pools) -> None:
    """Values the report may compute from the record, by its documented formulas."""
    from stallscope.analysis import TARGETS
    from stallscope.render.report_format import SMALL_PERCENT

    pools.add("any", SMALL_PERCENT)
    for good, bad in TARGETS.values():
        pools.add("any", good, bad)
    host = r.get("host") or {}
    dataset = r.get("dataset") or {}
    length = _num(dataset.get("length"))
    results = [res for res in r.get("results") or [] if isinstance(res, dict)]
    ok = [res for res in results if not res.get("error") and _rate(res.get("samples_per_s"))]
    pools.add("any", len(ok), len(results) - len(ok))
    pools.add("any", sum(res.get("batches_measured") or 0 for res in ok))
    pools.add("s", sum(_num(res.get("window_s")) or 0.0 for res in ok))
    trials = [
        t for t in r.get("trials") or [] if isinstance(t, dict) and _rate(t.get("samples_per_s"))
    ]
    pools.add("any", min(len(trials), 10), min(len(r.get("hotspots") or []), 8))
    pools.add(
        "any", sum(1 for t in r.get("trials") or [] if isinstance(t, dict) and t.get("error"))
    )
    # speed-ups: tuned best and each trial against the tuner's baseline; a result against
    # num_workers=0
    baseline = (
        _rate((r.get("baseline") or {}).get("samples_per_s"))
        if isinstance(r.get("baseline"), dict)
        else None
    )
    best = (
        _rate((r.get("best") or {}).get("samples_per_s"))
        if isinstance(r.get("best"), dict)
        else None
    )
    margin = _num((r.get("best") or {}).get("margin")) if isinstance(r.get("best"), dict) else None
    if margin is not None:
        pools.add("any", margin - 1.0)  # how much faster than the runner-up
        if margin > 0:
            pools.add("any", 1.0 / margin)  # the runner-up's rate over the pick's
    interval = (
        (r.get("best") or {}).get("margin_interval") if isinstance(r.get("best"), dict) else None
    )
    for end in interval if isinstance(interval, list) else []:
        if _num(end):
            pools.add("any", 1.0 / end)  # the runner-up over the pick, at each end
    if baseline:
        pools.add(
            "any",
            *[(x or 0.0) / baseline for x in [best] + [_rate(t["samples_per_s"]) for t in trials]],
        )
    if best:
        # the pick's gain over a trial it was measured beside (more workers than cores, threads)
        trial_rates = [_rate(t["samples_per_s"]) for t in trials]
        pools.add("any", *[best / x - 1.0 for x in trial_rates if x])
    zero = {
        res["config"].get("batch_size"): _rate(res["samples_per_s"])
        for res in ok
        if not res["config"].get("num_workers")
    }
    for res in ok:
        single = zero.get(res["config"].get("batch_size"))
        if single:
            pools.add("any", _rate(res["samples_per_s"]) / single)
    # epoch time = length / rate (bench results, tuned best and baseline); savings; start-up share
    rates = [_rate(res["samples_per_s"]) for res in ok] + [x for x in (best, baseline) if x]
    startups = [_num(res.get("startup_s")) for res in ok if _num(res.get("startup_s")) is not None]
    if length:
        epochs = [length / x for x in rates]
        pools.add("s", *epochs)
        pools.add("s", *[a - b for a in epochs for b in epochs])
        # an epoch without persistent workers: its loading plus the epoch-boundary gap
        gap = _num(((r.get("search") or {}).get("persistent_workers") or {}).get("gap_without_s"))
        if gap is not None:
            pools.add("s", *[e + gap for e in epochs])
        pools.add("any", *[s / e for s in startups for e in epochs])
        pools.add(
            "any",
            *[math.ceil(length / c["batch_size"]) for c, _ in _configs(r) if c.get("batch_size")],
        )
    # in-flight memory: batch bytes scaled to the batch size × prefetch × workers, against /dev/shm
    # and RAM
    ref_bytes, ref_bs = _num(dataset.get("batch_bytes")), _num(dataset.get("batch_size"))
    shm, ram = _num(host.get("shm_free_bytes")), _num(host.get("memory_available_bytes"))
    for config, res in _configs(r, trials=False):
        w, pf, bs = (
            config.get("num_workers") or 0,
            config.get("prefetch_factor") or 2,
            config.get("batch_size"),
        )
        pools.add("any", w * pf)
        if ref_bytes:
            per_batch = ref_bytes * bs / ref_bs if bs and ref_bs else ref_bytes
            in_flight = per_batch * pf * w
            rss = _num(((res or {}).get("resources") or {}).get("workers_rss_mb"))
            needed = in_flight + (rss * MIB if rss is not None else 0.0)
            pools.add("bytes", per_batch, in_flight, needed)
            if shm:
                pools.add("any", in_flight / shm)
            if ram:
                pools.add("any", needed / ram)
    # CPU: main + workers, and that as a share of the usable cores
    for res in [res.get("resources") for res in ok] + [r.get("resources")]:
        if isinstance(res, dict) and _num(res.get("main_cpu_percent")) is not None:
            total = res["main_cpu_percent"] + (res.get("workers_cpu_percent") or 0.0)
            pools.add("any", total)
            if host.get("cores"):
                pools.add("any", total / (host["cores"] * 100.0))
    # batch-time consistency p95 / p50
    for res in ok:
        lat = res.get("batch_ms") or {}
        if _num(lat.get("p50")) and _num(lat.get("p95")) is not None:
            pools.add("any", lat["p95"] / lat["p50"])
    # stages: the total and each share of it
    stage_ms = [_num(s.get("ms_per_sample")) for s in r.get("stages") or [] if isinstance(s, dict)]
    stage_ms = [x for x in stage_ms if x is not None]
    if stage_ms:
        total = sum(stage_ms)
        pools.add("ms", total)
        pools.add("any", *[x / total for x in stage_ms])
    # training loop: mean data wait and compute per step (record means, else the timeline's) and a
    # mean step
    means = {}
    for key in ("data_ms", "compute_ms"):
        summary = r.get(key)
        values = [_num(x) for x in (r.get("step_timeline") or {}).get(key) or []]
        values = [x for x in values if x is not None]
        if isinstance(summary, dict) and _num(summary.get("mean")) is not None:
            means[key] = summary["mean"]
        elif values:
            means[key] = sum(values) / len(values)
        if key in means:
            pools.add("ms", means[key])
    if len(means) == 2:
        pools.add("ms", means["data_ms"] + means["compute_ms"])
    # findings: counts by severity; memory growth over an epoch, per worker and across workers
    findings = [f for f in r.get("findings") or [] if isinstance(f, dict)]
    for severity in ("error", "warning", "info"):
        pools.add("any", sum(1 for f in findings if f.get("severity") == severity))
    workers = {c.get("num_workers") or 0 for c, _ in _configs(r)}
    for f in findings:
        evidence = f.get("evidence") or {}
        for k, v in evidence.items():
            if "per_1000" in k and _num(v) is not None and length:
                pools.add("any", v * length / 1000.0, *[v * length / 1000.0 * w for w in workers])
        # slowest outlier against the median; worker threads against the cores
        seconds = [_num(x) for x in evidence.get("seconds") or []]
        if seconds and None not in seconds and _num(evidence.get("median_s")):
            pools.add("any", max(seconds) / evidence["median_s"])
        w, t = _num(evidence.get("num_workers")), _num(evidence.get("threads_per_worker"))
        cores = _num(evidence.get("cores")) or _num(host.get("cores"))
        if w and t and cores:
            pools.add("any", w * t, w * t / cores)
    # the ceiling: the share of it the pick leaves; the training step with free data against the
    # loop's
    fraction = (
        _num((r.get("ceiling") or {}).get("pick_fraction"))
        if isinstance(r.get("ceiling"), dict)
        else None
    )
    if fraction is not None:
        pools.add("any", 1.0 - fraction)
    free = _num(r.get("free_data_step_s"))
    if free and len(means) == 2:
        pools.add("any", max(1.0, (means["data_ms"] + means["compute_ms"]) / (free * 1000.0)))
    # configs within this run's noise of the winner (NOTE [plateau]): each config's median over
    # the trials, the spread of its own measurements, and every median over every other
    by_config: dict[str, list[float]] = {}
    for t in r.get("trials") or []:
        rate = _num(t.get("samples_per_s")) if isinstance(t, dict) else None
        if rate and not t.get("error"):
            config = {k: v for k, v in (t.get("config") or {}).items() if k != "persistent_workers"}
            by_config.setdefault(repr(sorted(config.items())), []).append(rate)
    medians = [statistics.median(v) for v in by_config.values()]
    spreads = [
        (max(values) - min(values)) / statistics.median(values)
        for values in by_config.values()
        if len(values) >= 2
    ]
    pools.add("any", *spreads, *([statistics.median(spreads)] if spreads else []))
    pools.add("any", *[a / b for a in medians for b in medians if b])
    raced = [
        _num(h.get("samples_per_s"))
        for h in (r.get("best") or {}).get("head_to_head") or []
        if isinstance(h, dict)
    ]
    raced = [x for x in raced if x]
    pools.add("any", *[a / b for a in raced for b in raced])
    # the run's date
    started = _num(r.get("started_at"))
    if started:
        t = time.gmtime(started)
        pools.add("any", t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min)


def pools_for(record: dict) -> Pools:
    from stallscope.analysis.ceiling import judged_sections

    # The ceiling and the cores needed are judged again from the record's measurements when it is
    # rendered (``ceiling_facts``): their figures are today's, not those a command stored.
    record = {**record, **judged_sections(record)}
    pools = Pools()
    _walk(record, (), pools)
    _derive(record, pools)
    return pools


def _candidates(pools: Pools, unit: str) -> list[float]:
    """The values a number printed with ``unit`` may come from, in that unit."""
    k = pools.kinds
    if unit == "ms":
        values = k["ms"] | {v * 1000.0 for v in k["s"]}
    elif unit == "s":
        values = k["s"]
    elif unit == "min":
        values = {v / 60.0 for v in k["s"]}
    elif unit == "h":
        values = {v / 3600.0 for v in k["s"]}
    elif unit in BYTE_UNITS:
        scale = BYTE_UNITS[unit]
        values = {v / scale for v in k["bytes"]} | {v * MIB / scale for v in k["mib"]}
    elif unit == "%":
        values = k["any"] | {v * 100.0 for v in k["any"]}
    else:  # ratios (×), counts, configuration values, plain numbers
        values = k["any"]
    return sorted(values)


def unexplained_numbers(text: str, record: dict) -> list[str]:
    """Printed numbers that are neither record values nor derived from them under the
    formatting rules."""
    pools = pools_for(record)
    cache: dict[str, list[float]] = {}
    bad = []
    for tok, unit in tokens_with_units(VERSION_REQUIREMENT.sub("", text)):
        plain = tok.replace(",", "")
        if plain in pools.texts:
            continue
        if unit not in cache:
            cache[unit] = _candidates(pools, unit)
        decimals = len(plain.split(".")[1]) if "." in plain else 0
        # A percentage without decimals is a rounded share (75% for 0.749), never a count.
        if not _explained(float(plain), decimals, cache[unit], rounded=unit == "%"):
            bad.append(f"{tok}{' ' + unit if unit else ''}")
    return bad


def _explained(
    value: float, decimals: int, candidates: list[float], *, rounded: bool = False
) -> bool:
    half = 0.5 * 10.0**-decimals
    lo = bisect.bisect_left(candidates, value - half - 1e-9)
    for c in candidates[lo:]:
        if c > value + half + 1e-9:
            return False
        if decimals > 0 or rounded:
            return True
        # An integer: exact, or a rounded value of at least 100 (printed without decimals).
        if abs(c - value) < 1e-9 or c >= 99.5:
            return True
    return False
