"""Small helpers shared by the check probes."""

from __future__ import annotations

from typing import Any

from ..errors import describe_exception, worker_traceback_tail


def describe_worker_exception(exc: BaseException, limit: int = 300) -> str:
    """One line for an exception a DataLoader re-raised from a worker.

    torch wraps a worker's exception with the worker's whole traceback in the
    message; its last line (``OSError: truncated shard``) is what a reader needs.
    """
    tail = worker_traceback_tail(exc)
    if tail is None:
        return describe_exception(exc, limit)
    last = tail[0]
    if len(last) > limit:
        last = last[: limit - 1] + "…"
    return f"{last} (raised in a DataLoader worker)"


# Errors a probe's own machinery causes, never the user's pipeline (NOTE [probes on real objects]
# in pickling.py): with the reason the probe gives instead of a finding.
_MACHINERY_ERRORS = (
    (
        "daemonic processes are not allowed to have children",
        "the pipeline starts worker processes of its own (a wrapped DataLoader), which "
        "cannot start inside "
        "the probe's worker processes",
    ),
    ("_ArrayStandIn", "the probe's stand-in for an array reached the pipeline"),
)


def machinery_error(text: str | None) -> str | None:
    """The reason a probe cannot judge, when ``text`` (an error it recorded) is one its own
    machinery caused; None for an error of the user's pipeline."""
    if not text:
        return None
    for marker, reason in _MACHINERY_ERRORS:
        if marker in text:
            return reason
    return None


def probe_error_texts(record: dict[str, Any] | None) -> list[str]:
    """Every error text a probe's record holds (health: per index, start-up and collate; the
    DataLoader-based probes: their one ``error``)."""
    if not isinstance(record, dict):
        return []
    texts = [str(record.get("error") or "")]
    for entry in record.get("errors") or []:
        texts.append(f"{entry.get('type', '')}: {entry.get('message', '')}")
    init = record.get("init_error") or {}
    texts.append(str(init.get("message") or ""))
    for entry in (record.get("collate") or {}).get("errors") or []:
        texts.append(str(entry.get("error") or ""))
    return [t for t in texts if t]


def health_blocked(health: dict[str, Any], iterable: bool) -> str | None:
    """Why the DataLoader-based probes cannot run after the sample-health probe's ``health``
    record (None: they can)."""
    if health.get("init_error"):
        return "the workers could not start"
    if iterable:
        # A stream cannot skip a bad item: a DataLoader over it would stall or stop on it again.
        stuck = (health.get("hangs") or []) + (health.get("unfinished") or [])
        if stuck:
            return f"the stream hangs at item {stuck[0]['index']}"
        if health.get("errors"):
            return f"the stream raises at item {health['errors'][0]['index']}"
    if health and not health.get("fetched") and (health.get("errors_total") or health.get("hangs")):
        return "no sample could be fetched"
    return None
