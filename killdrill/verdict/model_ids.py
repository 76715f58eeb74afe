"""Keys made of a model's tool-call ids: the fact behind the ``model_id_key`` cause.

The model fake records in the ledger the tool-call ids it issued (a model call's ``ids``), new on
every answer as a real model's are.  An effect whose keys contain them was keyed by the model's
id (``ToolContext.tool_call_id``, a tool_use block's ``id``): a resume that asks the model again
gets a new id and a new key.  Said from the ledger, never guessed from a key's shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from killdrill.records import Call, LedgerSnapshot

__all__ = ["issued_ids", "model_id_story"]

_WIRE_PREFIXES = ("call_", "toolu_", "fc_")  # how the APIs spell an issued id on the wire


def issued_ids(ledger: LedgerSnapshot | None) -> dict[str, int]:
    """Every tool-call id the model fake issued in this case: id -> the attempt it answered."""
    out: dict[str, int] = {}
    for c in ledger.calls if ledger is not None else ():
        ids = c.payload.get("ids") if c.provider == "model" else None
        for i in ids if isinstance(ids, list) else ():
            out.setdefault(str(i), c.attempt)
    return out


def _spelled(key: str, issued: str) -> str:
    """The issued id as the key carries it (``call_...``), else the bare id."""
    for prefix in _WIRE_PREFIXES:
        if prefix + issued in key:
            return prefix + issued
    return issued


def model_id_story(calls: Sequence[Call], issued: Mapping[str, int], name: str) -> str | None:
    """What was observed when the keys of an effect's calls contain ids the model issued, else None."""
    if not issued or len({c.key for c in calls}) < 2:
        return None
    found: list[str] = []
    for c in calls:
        hit = next((i for i in issued if c.key and i in c.key), None) if c.key else None
        if hit is None:
            return None  # one key not made of a model id: another story
        found.append(f"{_spelled(str(c.key), hit)} in attempt {c.attempt}")
    return (
        f"{name}'s keys contain the tool-call ids the model issued ({', '.join(dict.fromkeys(found))}): "
        "a model answers every request with new ids, a resumed attempt's included, so the key changed"
    )
