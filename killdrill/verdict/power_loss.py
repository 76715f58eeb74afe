"""The power-loss story of a violation: a resume that ran on what a power loss left.

A power loss (``powerloss:POINT``, ``faults.powerloss``) drops every write not synced; the
attempt after it resumes from older state (in a deployment every process goes down with the
machine and the loss is recorded on the last launch before it: every later number came after).
When that loss explains a violation (the effect's key was made again because the checkpointed
one was lost, an effect done and heard of was done again, a resume crashed on what was left),
the cause is ``unsynced_write``: which file lost what, the fsync that was missing, and the fix
for that file (SQLite's ``synchronous``, a JSON file's fsync of the file and its directory).
Read from facts only: ``Attempt.lost_writes``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from killdrill.records import (
    DUPLICATE_EFFECT,
    KEY_CHANGED,
    RESUME_FAILED,
    UNEXPECTED_EFFECT,
    Attempt,
    Violation,
)
from killdrill.verdict.causes import CauseName

_EXPLAINED = (DUPLICATE_EFFECT, KEY_CHANGED, UNEXPECTED_EFFECT, RESUME_FAILED)
_SQLITE_SUFFIXES = ("-wal", "-journal", ".db", ".sqlite", ".sqlite3")


def _lost(w: Mapping[str, Any]) -> str:
    synced = "fsynced before, not since its last write" if w.get("ever_synced") else "never fsynced"
    return f"{w.get('path')} ({w.get('size_seen')} bytes written, {w.get('size_kept')} survived: {synced})"


def _fix(lost: Sequence[Mapping[str, Any]]) -> str:
    paths = [str(w.get("path", "")) for w in lost]
    if any(p.endswith("-wal") for p in paths):
        fix = (
            "SQLite in WAL mode under synchronous=NORMAL (or OFF) syncs no commit: set PRAGMA "
            "synchronous=FULL on every connection that writes the checkpoint"
        )
    elif any(p.endswith(_SQLITE_SUFFIXES) for p in paths):
        fix = "SQLite under synchronous=OFF syncs nothing: set PRAGMA synchronous=FULL"
    else:
        fix = (
            f"fsync {paths[0]} before relying on it: write a temporary file, flush and os.fsync it, "
            "os.replace it over the old one, then fsync the directory (os.open it O_RDONLY, os.fsync)"
        )
    return fix + "; a SIGKILL keeps what the kernel holds, a power loss does not"


def power_loss_cause(v: Violation, attempts: Sequence[Attempt], cause: str) -> tuple[str, str] | None:
    """``(observed, fix)`` when a power loss before ``v``'s later attempts dropped unsynced data
    that explains it (``cause``: what the diagnosis found without it); None otherwise."""
    if v.kind not in _EXPLAINED:
        return None
    losses = [a for a in attempts if a.lost_writes]
    if not losses:
        return None
    loss = losses[0]
    if v.kind == RESUME_FAILED:
        after = [a for a in attempts if a.number > loss.number]
        if not after:
            return None
    else:
        landed = sorted({c.attempt for c in v.calls if c.landed})
        if not landed or landed[0] > loss.number or landed[-1] <= loss.number:
            return None  # not repeated across the loss
        heard = not any(
            isinstance(c, Mapping) and c.get("response_lost") for c in v.detail.get("calls") or []
        )
        if cause != str(CauseName.KEY_NEW_PER_ATTEMPT) and not heard:
            return None  # the caller never heard back: the key story stands, as at a plain kill
    lost = ", ".join(_lost(w) for w in loss.lost_writes)
    if loss.process is not None:  # a deployment's: every process went down with the machine
        observed = (
            f"the machine lost power ({loss.kill}: every process of the deployment killed) and dropped"
            f" the unsynced data of {lost}; the deployment started again from what was synced before"
            f" (attempt {loss.number + 1} on)"
        )
        return observed, _fix(loss.lost_writes)
    observed = (
        f"power was lost after attempt {loss.number} (killed at {loss.killed_at}) and dropped the"
        f" unsynced data of {lost}; attempt {loss.number + 1} resumed from what was synced before"
    )
    return observed, _fix(loss.lost_writes)
