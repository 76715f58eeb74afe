"""Strings written back as placeholders in what a ledger recorded (``{thread}``, ``{workdir}``).

Agents put their thread into keys and refs (rightly: it is what makes them stable), and every
case has its own thread, so the drill reads each case with its thread and workdir written as
``{thread}``/``{workdir}``: otherwise no case could be compared with the baseline.  Done while
the rows are parsed (``Ledger.snapshot(written_as=...)``), not over the parsed calls afterwards:
at 10^5 calls the second pass and its copies were a third of a case's read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from killdrill.records import LedgerSnapshot

__all__ = ["Substitution", "replace_all"]


def replace_all(value: Any, subs: Mapping[str, str]) -> Any:
    """``value`` (a JSON value) with every ``old`` of ``subs`` replaced in its strings and keys."""
    if isinstance(value, str):
        for old, new in subs.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {replace_all(k, subs): replace_all(v, subs) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(replace_all(v, subs) for v in value)
    return value


def same_or_replaced(value: Any, subs: Mapping[str, str]) -> Any:
    """:func:`replace_all`, but ``value`` itself when nothing in it changes (no copy)."""
    if isinstance(value, str):
        for old, new in subs.items():
            if old in value:
                value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        out = {same_or_replaced(k, subs): same_or_replaced(v, subs) for k, v in value.items()}
        same = len(out) == len(value) and all(
            a is b and out[a] is v for a, (b, v) in zip(out, value.items(), strict=True)
        )
        return value if same else out
    if isinstance(value, list | tuple):
        items = [same_or_replaced(v, subs) for v in value]
        return value if all(a is b for a, b in zip(value, items, strict=True)) else type(value)(items)
    return value


class Substitution:
    """``subs`` (old -> new), ready to apply to many rows.

    A stored payload is JSON text, in which a string that holds no quote, backslash, control
    character or non-ASCII character appears verbatim: when every ``old`` is such a string,
    one search of the text tells the payloads nothing changes in, and only the others are
    walked (:func:`same_or_replaced`, which is exact).  Otherwise every payload is walked."""

    def __init__(self, subs: Mapping[str, str]) -> None:
        self.subs = {old: new for old, new in subs.items() if old}
        self._pairs = tuple(self.subs.items())
        olds = sorted(self.subs, key=len, reverse=True)
        self._search = re.compile("|".join(map(re.escape, olds))).search if olds else None
        self._verbatim = all(
            old.isascii() and old.isprintable() and not set(old) & {'"', "\\"} for old in olds
        )

    def key(self, key: str | None) -> str | None:
        """A key, replaced.  A substring test per ``old``, not the regex: keys are short and most
        hold the thread, and the search then every replace took 1.1 ms per 1,000 such keys (0.54
        now; 0.2 either way for keys without it).  Over ``_pairs``, made once as ``_search`` is:
        over the dict's items, keys without the thread took 0.35 ms."""
        if key is None:
            return key
        for old, new in self._pairs:
            if old in key:
                key = key.replace(old, new)
        return key

    def json(self, text: str, value: Any) -> Any:
        """``value``, parsed from the stored JSON ``text``, replaced (itself when nothing changes)."""
        if self._search is None or (self._verbatim and self._search(text) is None):
            return value
        return same_or_replaced(value, self.subs)

    def rest(self, snap: LedgerSnapshot) -> LedgerSnapshot:
        """``snap``'s state and keys in flight replaced (its calls as they are)."""
        in_flight = tuple(replace(f, key=replace_all(f.key, self.subs)) for f in snap.in_flight)
        return replace(snap, state=replace_all(snap.state, self.subs), in_flight=in_flight)
