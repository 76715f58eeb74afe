"""The one canonical form of a value: sorted-key, compact JSON.

Two payloads are the same payload iff their canonical forms are equal: the ledger stores this
form, the verdict compares it, the effects toolkit hashes it into keys. One function, two
policies for values JSON cannot say (datetimes, sets, objects): what a fake *records* is
``str()``-ed (the agent's call must still be recorded), what a *key* is derived from is refused
(``strict``: its text could change between attempts and silently change the key).
Standard library only: the agent imports it through the fakes and the effects toolkit.
"""

from __future__ import annotations

import json
import json.encoder
import math
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["canonical_json", "canonical_value", "json_reader"]


def _refuse(obj: object) -> Any:
    raise TypeError(f"{type(obj).__name__} is not canonical JSON; convert it explicitly: {obj!r}")


def _check_strict(obj: Any) -> None:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"non-finite float {obj!r} has no canonical JSON form")
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"payload keys must be strings, got {k!r}")
            _check_strict(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _check_strict(v)


_LENIENT = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
"""One encoder, not one per call: ``json.dumps`` with options builds a new one each time, and the
verdict encodes every call's payload (about 40% of its time on a 10^4-effect case)."""

# the C accelerator's encoder factory (None on an interpreter without it: the encoder above)
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_encode_str: Any = json.encoder.encode_basestring

_per_thread = threading.local()


def _c_encoder() -> tuple[Any, dict[int, Any]]:
    """This thread's C encoder with :data:`_LENIENT`'s options, and its cycle markers.

    ``JSONEncoder.encode`` builds a C encoder on every call, which was most of its cost per
    payload (three to four times the encoding of a small payload); one per thread is
    kept instead.  Its markers (the cycle check) are empty between calls, cleared after a failure.
    """
    found: tuple[Any, dict[int, Any]] | None = getattr(_per_thread, "encoder", None)
    if found is None:
        markers: dict[int, Any] = {}
        encoder = _c_make_encoder(markers, str, _encode_str, None, ":", ",", True, False, True)
        found = _per_thread.encoder = (encoder, markers)
    return found


def json_reader() -> Callable[[str], Any]:
    """This thread's ``json.loads`` for the texts the ledger stores (one value, nothing around
    it): the C scanner called directly, four times faster per payload than ``json.loads``'s
    wrappers (a third of reading a 10^5-call ledger).  Any other text goes to
    ``json.loads``, which parses it or raises its usual error.  One scanner per thread: its
    key memo is its own."""
    reader: Callable[[str], Any] | None = getattr(_per_thread, "reader", None)
    if reader is None:
        scan, loads = json.JSONDecoder().scan_once, json.loads  # type: ignore[attr-defined]

        def reader(text: str) -> Any:
            try:
                value, end = scan(text, 0)
            except StopIteration:
                return loads(text)
            return value if end == len(text) else loads(text)

        _per_thread.reader = reader
    return reader


def canonical_json(value: Any, *, strict: bool = False) -> str:
    """Sorted-key compact JSON text of ``value``: equal payloads give equal text.

    ``strict`` refuses what JSON cannot say exactly (non-JSON types, non-string keys, NaN and
    infinities) instead of ``str()``-ing it: for keys, which must not depend on a ``repr``."""
    if not strict:
        if _c_make_encoder is None:
            return _LENIENT.encode(value)
        encoder, markers = _c_encoder()
        try:
            return "".join(encoder(value, 0))
        except BaseException:
            markers.clear()
            raise
    _check_strict(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_refuse)


def canonical_value(value: Any) -> Any:
    """The JSON value ``value`` is stored and compared as (tuples become lists, keys sorted)."""
    return json.loads(canonical_json(value))
