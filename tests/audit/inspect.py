"""What a drill left: its processes still alive, and what it made outside them still there.

A drill's processes are found by the audit's private temporary folder in their environment
(every process a drill starts inherits the harness's ``TMPDIR`` or a run's folder under it) or
their command line; what it made, by the claims its harness wrote (``killdrill.ownership``),
read before the next run sweeps them, and by the temporary folder itself.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from killdrill import ownership
from tests import leftovers


def describe(pids: set[int]) -> list[str]:
    """``NAME: COMMAND LINE`` of each pid still there."""
    out = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
        except OSError:
            continue
        out.append(f"{name}: {line}")
    return out


def gone_within(marker: str, limit_s: float) -> tuple[float, list[str]]:
    """Seconds until no live process holds ``marker`` (at most ``limit_s``), and what the first
    scan saw."""
    start = time.monotonic()
    first = describe(processes_of(marker, scans=1))
    while time.monotonic() - start < limit_s and processes_of(marker, scans=1):
        time.sleep(0.05)
    return time.monotonic() - start, first


def processes_of(marker: str, scans: int = 25) -> set[int]:
    """Live processes (zombies excluded) whose environment or command line holds ``marker``,
    over repeated scans for a second (a pid-hopping daemon is seen between two of its pids)."""
    needle = marker.encode()
    seen: set[int] = set()
    for _ in range(scans):
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    found = needle in f.read()
            except OSError:
                found = False
            if (found or leftovers._matches(pid, needle)) and leftovers._alive(int(pid)):
                seen.add(int(pid))
        if scans > 1:
            time.sleep(0.04)
    return seen


def claims(tmp: Path) -> list[dict[str, Any]]:
    """Every claim written under ``tmp``'s owners' folder (released or not)."""
    out: list[dict[str, Any]] = []
    for record in (tmp / f"killdrill-owners-{os.getuid()}").glob("*.jsonl"):
        for line in record.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if "kind" in entry:
                out.append(entry)
    return out


def up(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def redis_keys(found: list[dict[str, Any]]) -> list[str]:
    prefixes = {c["prefix"] for c in found if c["kind"] == ownership.REDIS_KEYS}
    if not prefixes:
        return []
    import redis

    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        return [k.decode() for p in sorted(prefixes) for k in client.scan_iter(match=f"{p}*")]
    finally:
        client.close()


def rabbitmq_vhosts(found: list[dict[str, Any]]) -> list[str]:
    claimed = {c["vhost"] for c in found if c["kind"] == ownership.RABBITMQ_VHOST}
    if not claimed:
        return []
    names = subprocess.run(
        ["rabbitmqctl", "-q", "list_vhosts", "name"], capture_output=True, text=True, check=True
    ).stdout.split()
    return sorted(claimed & set(names))


def postgres_schemas(url: str, found: list[dict[str, Any]]) -> list[str]:
    claimed = {c["schema"] for c in found if c["kind"] == ownership.POSTGRES_SCHEMA}
    if not claimed:
        return []
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'kd_%'"))
            databases = conn.execute(sa.text("SELECT datname FROM pg_database WHERE datname LIKE 'kd_%'"))
            return sorted(claimed & ({n for (n,) in rows} | {n for (n,) in databases}))
    finally:
        engine.dispose()


def folder_entries(tmp: Path) -> list[str]:
    """What is in the harness's temporary folder (the owners' record folder of a living owner
    excepted: none is alive once the audit asks)."""
    return sorted(p.name for p in tmp.iterdir())


def left(tmp: Path, found: list[dict[str, Any]], postgres_url: str) -> dict[str, list[str]]:
    """Everything still there of what the drills under ``tmp`` made, by kind."""
    out = {
        "folders": folder_entries(tmp),
        "redis keys": redis_keys(found) if up(6379) else [],
        "rabbitmq vhosts": rabbitmq_vhosts(found) if up(5672) else [],
        "postgres schemas": postgres_schemas(postgres_url, found) if up(5432) else [],
    }
    return {k: v for k, v in out.items() if v}
