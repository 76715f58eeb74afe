"""What an audit found: one record per finding, and the report that holds them (text and JSON).

Below both the queries (:mod:`._queries`, which build it) and the command (the package), so
neither imports the other for them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from killdrill.errors import UsageError

__all__ = [
    "AuditError",
    "AuditReport",
    "DuplicateSuccess",
    "MultiKeyOperation",
    "ReplayStats",
    "StuckInFlight",
]


class AuditError(UsageError):
    """The log cannot be audited (bad URL, no such file, not a killdrill effect log)."""


@dataclass(frozen=True)
class DuplicateSuccess:
    key: str
    successes: int
    thread: str | None
    node: str | None
    attempts: list[int | None]
    owners: list[str | None]


@dataclass(frozen=True)
class MultiKeyOperation:
    by: str  # "operation" (thread, node, occurrence) or "payload" (thread, node, payload hash)
    thread: str | None
    node: str | None
    occurrence: int | None
    payload_hash: str | None
    keys: list[str]


@dataclass(frozen=True)
class ReplayStats:
    fresh: int
    replayed: int
    reconciled: int
    keys: int
    ratio: float | None  # replayed / fresh; None when nothing succeeded fresh


@dataclass(frozen=True)
class StuckInFlight:
    key: str
    thread: str | None
    node: str | None
    attempt: int | None
    owner: str | None
    age_s: float


@dataclass(frozen=True)
class AuditReport:
    url: str
    in_flight_threshold_s: float
    duplicates: list[DuplicateSuccess] = field(default_factory=list)
    multi_key: list[MultiKeyOperation] = field(default_factory=list)
    stats: ReplayStats = field(default_factory=lambda: ReplayStats(0, 0, 0, 0, None))
    stuck: list[StuckInFlight] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No finding.  The replay ratio is a figure, not a finding."""
        return not (self.duplicates or self.multi_key or self.stuck)

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "ok": self.ok,
            "in_flight_threshold_s": self.in_flight_threshold_s,
            "duplicate_successes": [asdict(d) for d in self.duplicates],
            "multi_key_operations": [asdict(m) for m in self.multi_key],
            "replay_stats": asdict(self.stats),
            "stuck_in_flight": [asdict(s) for s in self.stuck],
        }

    def text(self) -> str:
        s = self.stats
        ratio = "n/a" if s.ratio is None else f"{s.ratio:.2f}"
        lines = [
            f"killdrill audit of {self.url}",
            f"{'check':<34} {'findings':>8}",
            f"{'keys with >1 fresh success':<34} {len(self.duplicates):>8}",
            f"{'operations with >1 key':<34} {len(self.multi_key):>8}",
            f"{'in flight > ' + format(self.in_flight_threshold_s, 'g') + 's':<34} {len(self.stuck):>8}",
            f"replayed/fresh: {s.replayed}/{s.fresh} (ratio {ratio}), "
            f"reconciled {s.reconciled}, keys {s.keys}",
        ]
        for d in self.duplicates:
            lines.append(
                f"  DUPLICATE {d.key} ({d.node}, thread {d.thread}): {d.successes} fresh successes, "
                f"attempts {d.attempts}"
            )
        for m in self.multi_key:
            what = f"occurrence {m.occurrence}" if m.by == "operation" else f"payload {m.payload_hash}"
            lines.append(f"  KEY CHANGED {m.node} ({what}, thread {m.thread}): {len(m.keys)} keys {m.keys}")
        for st in self.stuck:
            lines.append(
                f"  STUCK {st.key} ({st.node}, thread {st.thread}): in flight {st.age_s:.0f}s, "
                f"attempt {st.attempt}, owner {st.owner}"
            )
        lines.append("clean" if self.ok else "findings: see above")
        return "\n".join(lines)
