"""The regression corpus: each distinct shrunk failure of every chaos job, replayed by the
pytest plugin (``--killdrill-regressions=PATH``).

Several jobs may update one corpus at once (a CI matrix on a shared volume): every update is
a read-modify-write under an exclusive ``fcntl`` lock on a sidecar lock file, and the new
text replaces the old by an atomic rename, so no entry is lost and no reader sees half a file.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from killdrill.chaos.report import atomic_write_text
from killdrill.chaos.shrink import Shrunk
from killdrill.errors import UsageError

__all__ = ["CORPUS_VERSION", "corpus_lock", "update_corpus"]

CORPUS_VERSION = 1


@contextlib.contextmanager
def corpus_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``PATH.lock`` (the corpus itself is replaced, so it cannot
    carry the lock: a waiter would hold the old inode)."""
    lock = path.with_name(path.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def update_corpus(
    path: str | os.PathLike[str], command: Sequence[str], failures: Sequence[Shrunk], seed: int
) -> int:
    """Append new (command, schedule, kinds) entries; sorted, so a diff shows only what is new.

    Format: ``{"version": 1, "regressions": [{"command", "schedule", "kinds", "seed", "found"}]}``.
    Returns how many entries were added.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with corpus_lock(p):
        return _update_locked(p, command, failures, seed)


def _update_locked(p: Path, command: Sequence[str], failures: Sequence[Shrunk], seed: int) -> int:
    data: dict[str, Any] = {"version": CORPUS_VERSION, "regressions": []}
    text = p.read_text(encoding="utf-8") if p.exists() else ""
    if text.strip():
        data = json.loads(text)
        if data.get("version") != CORPUS_VERSION or not isinstance(data.get("regressions"), list):
            raise UsageError(f"{p} is not a killdrill regression corpus (version {CORPUS_VERSION})")

    def ident(e: Mapping[str, Any]) -> tuple[Any, ...]:
        return (list(e["command"]), e["schedule"], sorted(e["kinds"]))

    known = {json.dumps(ident(e)) for e in data["regressions"]}
    today = _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    added = 0
    for f in failures:
        entry = {
            "command": list(command),
            "schedule": f.schedule,
            "kinds": sorted(f.kinds),
            "seed": seed,
            "found": today,
        }
        if json.dumps(ident(entry)) not in known:
            known.add(json.dumps(ident(entry)))
            data["regressions"].append(entry)
            added += 1
    data["regressions"].sort(key=lambda e: json.dumps(ident(e)))
    out = {"version": CORPUS_VERSION, "regressions": data["regressions"]}
    atomic_write_text(p, json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    return added
