"""DBOS's scripted human (``--answer``): a workflow waiting in ``DBOS.recv(topic)`` gets the next
answer as a message, sent with ``DBOS.send(workflow_id, ANSWER, topic)`` from outside the
workflow, as an approver's endpoint sends it (DBOS's human-in-the-loop pattern).

Part of :mod:`killdrill.integrations.dbos`, which wraps ``SystemDatabase.recv_setup`` (the first
phase of ``recv`` and ``recv_async`` alike) with :func:`wrap_recv_setup` when the drill gave
answers.  The wait's identity across kills is DBOS's own: the workflow id and the ``recv``'s
function id (the same on every recovery).  A ``recv`` DBOS already recorded replays its message
and gets nothing; a new one takes the next answer (:mod:`killdrill.integrations._answers`), and
the message is sent with an idempotency key derived from that identity, so a kill between the send
and the ``recv``'s record, which brings the same wait back, neither loses the answer nor sends it
twice (a second copy would reach the next ``recv`` on the same topic).  A ``recv`` with no answer
left waits as DBOS waits (its timeout); the agent's stderr says which one.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from killdrill.integrations import _answers

__all__ = ["wait_key", "wrap_recv_setup"]


def wait_key(workflow_id: str, function_id: int) -> str:
    """The wait's identity across kills: DBOS replays a workflow's operations under the same ids."""
    return f"dbos:{workflow_id}:{function_id}"


def _recorded(sysdb: Any, workflow_id: str, function_id: int) -> bool:
    """DBOS recorded this ``recv`` already (a recovery replays its message)."""
    return sysdb.check_operation_execution(workflow_id, function_id, "DBOS.recv") is not None


def _send(workflow_id: str, value: Any, topic: str | None, key: str) -> None:
    """``DBOS.send`` from a thread of its own: no workflow context, as an endpoint sends it."""
    from dbos import DBOS  # loaded: the workflow calling recv came from it

    failed: list[BaseException] = []

    def person() -> None:
        try:
            DBOS.send(workflow_id, value, topic, idempotency_key=key)
        except BaseException as exc:  # re-raised in the workflow's thread
            failed.append(exc)

    thread = threading.Thread(target=person, name="killdrill-answer", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def wrap_recv_setup(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``recv_setup`` that first sends a waiting ``recv`` its answer (the next one, or the one it
    got before a kill)."""

    @functools.wraps(orig)
    def recv_setup(
        self: Any, workflow_id: str, function_id: int, timeout_function_id: int, topic: str | None, *rest: Any
    ) -> Any:
        if not _recorded(self, workflow_id, function_id):
            key = wait_key(workflow_id, function_id)
            values = _answers.answers_for([key])
            if values is None:
                _answers.none_left("dbos", f"recv({topic!r}) of workflow {workflow_id} waits")
            else:
                _send(workflow_id, values[0], topic, key)
        return orig(self, workflow_id, function_id, timeout_function_id, topic, *rest)

    return recv_setup
