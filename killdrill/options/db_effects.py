"""The rows of effects in the agent's own database: ``--effect-table 'receipts(order_id)'`` and
``--effect-db URL`` (``killdrill.drill.db_effects`` reads the rows and gives them to the verdict)."""

from __future__ import annotations

import re
from typing import Any

from killdrill.options.kinds import Option, OptionError, Pairs, Text

__all__ = ["DB_EFFECT_ROWS", "join_table", "split_table"]

_TABLE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\(([^()]*)\))?\s*(?:=(.*))?$", re.S)
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def split_table(text: str) -> tuple[str, tuple[tuple[str, ...], str | None]]:
    """``TABLE(COL,...)`` or ``NAME(COL,...)=SELECT ...``: the effect's name, the columns that
    identify one logical effect (none: the whole row less its volatile columns) and the query
    (None: every row of the table)."""
    m = _TABLE.match(text)
    columns = tuple(c.strip() for c in (m.group(2) or "").split(",") if c.strip()) if m else ()
    query = m.group(3).strip() if m and m.group(3) is not None else None
    if m is None or not all(_COLUMN.match(c) for c in columns) or query == "":
        raise OptionError(f"{text!r}: expected TABLE(COLUMN,...) or NAME(COLUMN,...)=SELECT ...")
    return m.group(1), (columns, query)


def join_table(name: str, value: Any) -> str:
    if isinstance(value, str):  # a marker's {"receipts": "order_id"}
        return f"{name}({value})"
    columns, query = value
    return f"{name}({','.join(columns)})" + (f"={query}" if query else "")


DB_EFFECT_ROWS: tuple[Option, ...] = (
    Option(
        "effect_table",
        Pairs(split_table, join_table, "TABLE(COLUMN,...)"),
        {},
        "rows of this table of the agent's own database are effects, one per value of the columns "
        "named (repeatable; NAME(COLUMN,...)=SELECT ... reads a query's rows); needs --effect-db",
        "--effect-table",
        discovery=True,
    ),
    Option(
        "effect_db",
        Text(metavar="URL"),
        None,
        "the SQLAlchemy URL of the database the agent writes its effect rows to ({workdir} and "
        "{thread} filled; PostgreSQL: each run gets its own schema, see docs)",
        "--effect-db",
        discovery=True,
    ),
)
"""The drill table's rows of database effects."""
