"""Scaffolding shared by the detection corpus: argv, a SQLite checkpoint, a checkpointed step.

Every agent in this folder is run as ``python AGENT.py --thread {thread} --workdir {workdir}``.
The checkpoint is the agent's own durable memory: a node's output is committed, then
``committed:NODE`` is announced, and a resumed attempt skips every node already committed.
Kept here so each agent file shows only its effects (and its one planted defect).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import killdrill
from killdrill.fakes import Fakes, connect

if TYPE_CHECKING:
    from killdrill.effects import ResultStore


class Run:
    """One attempt of an agent: its thread, its checkpoint, its fakes and (lazily) an effect store."""

    def __init__(self) -> None:
        parser = argparse.ArgumentParser()
        parser.add_argument("--thread", required=True)
        parser.add_argument("--workdir", required=True)
        args = parser.parse_args()
        self.thread: str = args.thread
        self.workdir = Path(args.workdir)
        self.db = str(self.workdir / "ckpt.sqlite")
        self.conn = sqlite3.connect(self.db, timeout=60, isolation_level=None)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS ckpt"
            " (thread TEXT, node TEXT, output TEXT, PRIMARY KEY (thread, node))"
        )
        self.fakes: Fakes = connect(thread=self.thread)
        self._store: ResultStore | None = None

    def store(self, claim_strategy: str = "atomic") -> ResultStore:
        """The effect store, in the checkpoint's own SQLite file."""
        if self._store is None:
            from killdrill.effects import ResultStore

            self._store = ResultStore(self.db, claim_strategy=claim_strategy)
        return self._store

    def load(self, node: str) -> dict[str, Any] | None:
        row = self.conn.execute(
            "SELECT output FROM ckpt WHERE thread = ? AND node = ?", (self.thread, node)
        ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def save(self, node: str, output: Any) -> None:
        """Commit ``output`` as the node's checkpoint, then announce ``committed:NODE``."""
        self.conn.execute(
            "INSERT OR REPLACE INTO ckpt VALUES (?, ?, ?)", (self.thread, node, json.dumps({"v": output}))
        )
        killdrill.boundary(f"committed:{node}")

    def step(self, node: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` as node ``node`` unless an earlier attempt committed it; its output either way."""
        done = self.load(node)
        if done is not None:
            return done["v"]
        with killdrill.node(node):
            output = fn()
        self.save(node, output)
        return json.loads(json.dumps(output))
