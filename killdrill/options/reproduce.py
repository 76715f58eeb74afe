"""A case's reproduction line: the options that differ from the defaults, from the drill's table."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from killdrill.options import OPTIONS, DrillOptions
from killdrill.options.kinds import Flag

__all__ = ["reproduce_args", "reproduce_line"]


def reproduce_line(command: Sequence[str], options: DrillOptions, schedule: str) -> str:
    """``killdrill run`` of one case: the options that differ from the defaults, from the table."""
    args = ["killdrill", "run", "--schedule", str(schedule), *reproduce_args(options)]
    return shlex.join([*args, "--", *command])


def reproduce_args(options: DrillOptions) -> list[str]:
    """The flags that give ``options`` back, in table order, defaults and unreproduced fields left out."""
    args: list[str] = []
    for row in OPTIONS:
        value = getattr(options, row.field)
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
