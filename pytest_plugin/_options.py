"""The plugin's options: the ini keys and marker arguments, read into DrillOptions values.

One row of ``killdrill.options`` per option; a bad value is a :class:`_Usage` (one line).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from killdrill.integrations import option_rows
from killdrill.options import OPTIONS, Option, Spelling

MARKER = "killdrill"

# field -> its row: the drill's table (killdrill.options) and the integrations' own rows (their
# records: --broker is broker= and killdrill_broker); ini key -> row: killdrill_FIELD for each.
ROWS: dict[str, Option] = {row.field: row for row in (*OPTIONS, *option_rows())}
_INI: dict[str, Option] = {row.ini: row for row in ROWS.values()}
OPTION_NAMES = frozenset(ROWS)
_MARKER_ARGS = frozenset({"points", "discover", "command"})


class _Usage(Exception):
    """A bad marker argument or option value: reported once, in one line, as a test error."""


def _check_schedule(text: str, where: str) -> str:
    from killdrill.points import ScheduleError, parse_schedule

    if isinstance(text, str) and not text.strip():
        raise pytest.UsageError(f"{where}: an empty schedule (write 'none' for a case without a kill)")
    try:
        return str(parse_schedule(text))
    except ScheduleError as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None


def _ini_options(config: pytest.Config) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, row in _INI.items():
        raw = config.getini(name)
        if raw in (None, "", []) or (row.kind.ini_type == "bool" and raw is False):
            continue
        out[row.field] = _convert_option(row.field, raw, f"ini {row.spell(Spelling.INI)}")
    return out


def _convert_option(opt: str, raw: Any, where: str) -> Any:
    """Ini text or marker/keyword values into DrillOptions values (the table's parsers), with
    one-line errors."""
    from killdrill.options import OptionError, convert

    try:
        return convert(ROWS[opt], raw, where)
    except OptionError as exc:
        raise _Usage(f"killdrill {exc}") from None


def _marker_spec(
    markers: Sequence[pytest.Mark],
) -> tuple[list[str] | None, tuple[str, ...] | None, tuple[str, ...] | None, dict[str, Any]]:
    """points, discover command, command and options from the markers (the closest wins)."""
    points: list[str] | None = None
    discover: tuple[str, ...] | None = None
    command: tuple[str, ...] | None = None
    options: dict[str, Any] = {}
    for mark in reversed(list(markers)):  # farthest first, so the closest overrides
        if mark.args:
            raise _Usage(f"@pytest.mark.killdrill takes keyword arguments only, got {mark.args!r}")
        for k, v in mark.kwargs.items():
            if k == "points":
                if isinstance(v, str) or not all(isinstance(p, str) for p in v):
                    raise _Usage("points= must be a list of schedule strings")
                points = list(v)
            elif k in ("discover", "command"):
                if isinstance(v, str) or not all(isinstance(p, str) for p in v):
                    raise _Usage(f"{k}= must be the command as a list of strings")
                if k == "discover":
                    discover = tuple(v)
                else:
                    command = tuple(v)
            elif k in OPTION_NAMES:
                options[k] = _convert_option(k, v, f"marker {ROWS[k].spell(Spelling.KEYWORD)}")
            else:
                known = ", ".join(sorted(_MARKER_ARGS | OPTION_NAMES))
                raise _Usage(f"@pytest.mark.killdrill: unknown argument {k}= (known: {known})")
    return points, discover, command or discover, options
