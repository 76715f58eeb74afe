"""Forced timing for LangGraph drills: delays before the checkpointer's ``put_writes`` and ``put``
(``KILLDRILL_LANGGRAPH_CHECKPOINT_DELAY``), so a kill lands between a node's writes and its
checkpoint the way a slow database makes it land.  Standard library only."""

from __future__ import annotations

import os
import random
import re

__all__ = ["DELAY_ENV", "SEED_ENV", "DelaySpec", "delay_from_env", "parse_delay"]

DELAY_ENV = "KILLDRILL_LANGGRAPH_CHECKPOINT_DELAY"
SEED_ENV = "KILLDRILL_LANGGRAPH_DELAY_SEED"
_DUR = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


class DelaySpec:
    """Delays (seconds, as ``(low, high)`` ranges) before ``put_writes`` and ``put``."""

    def __init__(
        self,
        writes: tuple[float, float] | None,
        put: tuple[float, float] | None,
        seed: int | None = None,
    ) -> None:
        self.writes = writes
        self.put = put
        self.rng = random.Random(seed)

    def __bool__(self) -> bool:
        return bool(self.writes or self.put)

    def seconds(self, which: str) -> float:
        span = self.writes if which == "writes" else self.put
        if not span:
            return 0.0
        low, high = span
        return low if low == high else self.rng.uniform(low, high)


def _duration(text: str, whole: str) -> float:
    m = _DUR.match(text.strip())
    if not m:
        raise ValueError(f"{DELAY_ENV}={whole!r}: {text!r} is not a duration like 5ms, 250us or 0.1s")
    return float(m[1]) * _UNITS_S[m[2]]


def parse_delay(text: str, seed: int | None = None) -> DelaySpec:
    """Parse ``KILLDRILL_LANGGRAPH_CHECKPOINT_DELAY`` (grammar: :mod:`killdrill.integrations.langgraph`)."""
    spans: dict[str, tuple[float, float]] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        target, sep, value = part.partition("=")
        if not sep:
            target, value = "", part
        if target not in ("", "writes", "put"):
            raise ValueError(f"{DELAY_ENV}={text!r}: unknown target {target!r} (writes= or put=)")
        low_s, _, high_s = value.partition("..")
        low = _duration(low_s, text)
        high = _duration(high_s, text) if high_s else low
        if high < low:
            raise ValueError(f"{DELAY_ENV}={text!r}: range {value!r} goes down")
        for which in ("writes", "put") if not target else (target,):
            spans[which] = (low, high)
    return DelaySpec(spans.get("writes"), spans.get("put"), seed)


def delay_from_env() -> DelaySpec:
    seed = os.environ.get(SEED_ENV)
    return parse_delay(os.environ.get(DELAY_ENV, ""), int(seed) if seed else None)
