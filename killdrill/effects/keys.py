"""Stable idempotency keys: derived from what an action *is*, never from when it runs."""

from __future__ import annotations

import hashlib
from typing import Any

from killdrill.canonical import canonical_json as _canonical_json


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: equal payloads give equal text.

    Non-JSON values (datetimes, sets, objects) are refused rather than ``str()``-ed, since
    their text can change between attempts and silently change the key.
    """
    return _canonical_json(value, strict=True)


def payload_hash(payload: Any) -> str:
    """sha256 of the canonical JSON of ``payload`` (hex)."""
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def _slug(text: str, limit: int = 48) -> str:
    out = "".join(c if c.isalnum() or c in "_.-" else "_" for c in text)
    return out[:limit] or "effect"


def idempotency_key(thread_id: str, node_id: str, occurrence: int, payload: Any) -> str:
    """A key that is the same on every attempt of one logical operation and differs between two.

    Built from what the action *is*: the thread, the node, which occurrence of the effect
    within the node (0 for the first), and the canonical payload that identifies it (say
    account and billing cycle).  Never pass anything generated at run time (uuid4, the
    clock, a task id): the point is that a resumed attempt computes the same key.
    The node name is kept as a readable prefix: ``charge_customer-3f9a...`` (32 hex digits).
    """
    material = canonical_json(
        {"thread": thread_id, "node": node_id, "occurrence": occurrence, "payload": payload}
    )
    return f"{_slug(node_id)}-{hashlib.sha256(material.encode()).hexdigest()[:32]}"
