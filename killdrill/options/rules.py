"""The rule engine: options that go together (:class:`Rule`), each message naming the options
as the caller spelled them.  The tables' rules live beside their rows (``DRILL_RULES``, the
chaos rules); rules that need more than the options are worded there and checked by the drill.

A rule knows no table: whoever checks it passes the rows its message names (the drill's table,
another's, or both), so this module sits below every table and imports none of them."""

from __future__ import annotations

import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from killdrill.options.kinds import Option, OptionError, Spelled, Spelling

__all__ = ["Rule"]


class _Named:
    """One option in a rule's message: ``{field}`` is its name, ``{field:v}`` its name and value."""

    def __init__(self, row: Option, how: Spelling, value: Any) -> None:
        self.row, self.how, self.value = row, how, value

    def __format__(self, spec: str) -> str:
        return self.row.spell(self.how, self.value, with_value=spec == "v")


@dataclass(frozen=True)
class Rule:
    """Options that go together.  ``holds(values)`` false is an OptionError with ``message``, its
    ``{field}`` placeholders named as the caller spelled them (the first option of the message
    in its caller's spelling; an option the caller did not give, in that same spelling).
    ``holds`` None: the check needs more than the options (the command), its caller checks it."""

    message: str
    holds: Callable[[Mapping[str, Any]], bool] | None = None
    ini_default: bool = False  # an ini value of its first option is a session's default: not checked

    def check(self, values: Mapping[str, Any], spelled: Spelled, rows: Iterable[Option]) -> None:
        """Raise this rule's error unless it holds for ``values`` (``rows``: as for :meth:`error`)."""
        if self.ini_default:
            first = next((f for _, f, _, _ in string.Formatter().parse(self.message) if f), "")
            if _spelling(spelled, first, None) is Spelling.INI:
                return
        if self.holds is not None and not self.holds(values):
            raise self.error(values, spelled, rows)

    def error(self, values: Any, spelled: Spelled, rows: Iterable[Option], **extra: Any) -> OptionError:
        """The error of this rule for ``values`` (an options object or a mapping of fields), its
        options named from ``rows`` (the table, or tables, its message names: a later row wins a
        shared name)."""
        table = {r.field: r for r in rows}

        def get(name: str) -> Any:
            return values.get(name) if isinstance(values, Mapping) else getattr(values, name, None)

        names = [f for _, f, _, _ in string.Formatter().parse(self.message) if f in table]
        first = _spelling(spelled, names[0], None) if names else _spelling(spelled, "", None)
        args = {f: _Named(table[f], _spelling(spelled, f, first), get(f)) for f in names}
        return OptionError(self.message.format(**args, **extra))


def _spelling(spelled: Spelled, name: str, fallback: Spelling | None) -> Spelling:
    if isinstance(spelled, Spelling):
        return spelled
    return spelled.get(name) or fallback or Spelling.KEYWORD
