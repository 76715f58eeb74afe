"""A case's reproduction line: the options that differ from the defaults, from the drill's table."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from killdrill.options import OPTIONS, DrillOptions
from killdrill.options.kinds import Flag, Option

__all__ = ["reproduce_args", "reproduce_line"]


def reproduce_line(
    command: Sequence[str], options: DrillOptions, schedule: str, rows: Sequence[Option] = ()
) -> str:
    """``killdrill run`` of one case: the options that differ from the defaults, from the table
    (``rows``: the enabled integrations' own, whose values are ``options.integration_options``)."""
    args = ["killdrill", "run", "--schedule", str(schedule), *reproduce_args(options, rows)]
    return shlex.join([*args, "--", *command])


def reproduce_args(options: DrillOptions, rows: Sequence[Option] = ()) -> list[str]:
    """The flags that give ``options`` back, in table order (the drill's rows, then ``rows``),
    defaults and unreproduced fields left out."""
    args: list[str] = []
    values = [(r, getattr(options, r.field)) for r in OPTIONS]
    values += [(r, options.integration_options.get(r.field, r.default)) for r in rows]
    for row, value in values:
        if not row.reproduce or not row.flag or _same(value, row.default):
            continue
        texts = row.kind.to_texts(value)
        if isinstance(row.kind, Flag):
            args.append(row.flag)
        else:
            for text in texts:
                args += [row.flag, text]
    return args


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, Mapping | tuple | list):
        return not value
    return bool(value == default)
