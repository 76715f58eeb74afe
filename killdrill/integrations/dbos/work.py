"""The workflows a DBOS service still has to run, said on its stderr under a drill
(:mod:`killdrill.integrations._work`): a deployment's case then ends only once a restarted
service finished the workflows it recovered, whenever DBOS's queue gets to them (its next poll,
up to a second after launch), not whenever the driver happens to finish first.

Under a drill, a service's launch also waits (up to ``RECOVERY_WAIT_S``) until the workflows it
recovers have run, before the app can answer a request: which of a recovered workflow and a
client's re-sent request runs first is then always the same (the recovered one, an order
production has whenever recovery is quick), so a case's violations do not depend on that race."""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from killdrill.agent import armed
from killdrill.integrations._work import said as services_say
from killdrill.integrations._work import work_line

__all__ = ["RECOVERY_WAIT_S", "working", "wrap_launch"]

RECOVERY_WAIT_S = 5.0
"""How long a launch waits for the workflows it recovers (one may wait on a request to the app)."""
_finished: set[str] = set()  # workflows whose body ended in this process
_changed = threading.Condition()


@contextlib.contextmanager
def working(wid: str | None, name: str) -> Iterator[None]:
    """A workflow's body, said pending and then done (either way) on stderr under a drill: a
    deployment's case does not end while a service still runs one (``integrations._work``)."""
    said = wid is not None and armed() and services_say()
    if said:
        work_line("pending", str(wid), name)
    try:
        yield
    finally:
        if said:
            work_line("done", str(wid))
            with _changed:
                _finished.add(str(wid))
                _changed.notify_all()


def wrap_launch(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``DBOS._launch``: once launched (before the app can answer a request), say the workflows
    this process will run later, the pending ones its recovery re-enqueued and the queued ones."""

    @functools.wraps(orig)
    def launch(dbos: Any, *rest: Any, **kw: Any) -> Any:
        out = orig(dbos, *rest, **kw)
        if armed() and services_say():
            try:
                held = _unfinished(dbos)
            except Exception as exc:  # never break the agent's launch for the drill's bookkeeping
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write(f"killdrill: dbos: could not list the workflows to recover: {exc}\n")
                held = []
            for wid, name in held:
                work_line("pending", wid, name)
            deadline = time.monotonic() + RECOVERY_WAIT_S
            with _changed:
                while not {wid for wid, _ in held} <= _finished and time.monotonic() < deadline:
                    _changed.wait(max(0.0, deadline - time.monotonic()))
        return out

    return launch


def _unfinished(dbos: Any) -> list[tuple[str, str]]:
    """(workflow id, name) of the workflows of this version pending on this executor, or queued."""
    import sqlalchemy as sa  # a dependency of dbos, imported by it already
    from dbos._utils import GlobalParams

    table = dbos._sys_db.tables.workflow_status
    mine = sa.and_(table.c.status == "PENDING", table.c.executor_id == GlobalParams.executor_id)
    with dbos._sys_db.engine.begin() as conn:
        rows = conn.execute(
            sa.select(table.c.workflow_uuid, table.c.name).where(
                sa.or_(mine, table.c.status == "ENQUEUED"),
                table.c.application_version == GlobalParams.app_version,
            )
        ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]
