"""Temporal's scripted human (``--answer``): a workflow that waits in ``workflow.wait_condition`` for
a signal gets the next answer as that signal, sent to the running workflow through the worker's
client, as a person's client signals it (Temporal's human-in-the-loop pattern: a signal handler
sets a field, the run waits on a condition over it).

Part of :mod:`killdrill.integrations.temporal`, which, when the drill gave answers, wraps
``temporalio.workflow.wait_condition`` with :func:`wrap_wait_condition` and remembers each
``Worker``'s client and event loop (:func:`remember_worker`).  The wrapper changes nothing the
workflow does (no command, the same awaits): it only looks.  A wait whose condition does not hold
when the run reaches it, outside replay, is a question: the workflow's own signal is sent with the
next answer (a workflow with one signal handler gets the answer as its argument; with several,
``{"signal": NAME, "args": [...]}`` names one), before the workflow task that reached the wait
completes, so a kill can lose the task, never the question.

The wait's identity across kills is Temporal's: the workflow id, its run id and the wait's rank
in the run (replay reaches the waits in the same order), so a retried workflow task asks the same
wait again and gets the same answer (:mod:`killdrill.integrations._answers`); the signal carries a
request id derived from that identity, which the server deduplicates: a signal the server took
before the kill is not delivered twice (a second copy would satisfy the next wait).  A wait left
with no answer waits as Temporal waits; the agent's stderr says which one.
"""

from __future__ import annotations

import functools
import threading
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from killdrill.integrations import _answers

__all__ = ["remember_worker", "signal_for", "wait_key", "wrap_wait_condition"]

_SEND_TIMEOUT_S = 10.0
_lock = threading.Lock()
_worker: list[tuple[Any, Any]] = []  # (client, event loop) of the last Worker built in this process
_ranks: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()  # workflow object -> waits


def wait_key(workflow_id: str, run_id: str, rank: int) -> str:
    return f"temporal:{workflow_id}:{run_id}:{rank}"


def remember_worker(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``Worker.__init__`` that keeps its client and the loop it was built on (the loop the
    worker polls on: the signal is sent from there)."""

    @functools.wraps(orig)
    def init(self: Any, client: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, client, *args, **kwargs)
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        with _lock:
            _worker[:] = [(client, loop)]

    return init


def signal_for(value: Any, signals: list[str]) -> tuple[str, list[Any]]:
    """``(signal name, args)`` of one answer for a workflow whose named signals are ``signals``."""
    if isinstance(value, dict) and value.get("signal") in signals:
        args = value.get("args", [value["arg"]] if "arg" in value else [])
        return str(value["signal"]), list(args) if isinstance(args, list) else [args]
    if len(signals) == 1:
        return signals[0], [value]
    raise ValueError(
        f"--answer {value!r}: the workflow has the signals {', '.join(signals) or '(none)'}; "
        'name one: {"signal": NAME, "args": [...]}'
    )


async def _signal(client: Any, workflow_id: str, run_id: str, name: str, args: list[Any], key: str) -> None:
    """SignalWorkflowExecution with a request id of the wait's own (the server dedupes it)."""
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.workflowservice.v1 import SignalWorkflowExecutionRequest

    req = SignalWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
        signal_name=name,
        identity="killdrill --answer",
        request_id=str(uuid.uuid5(uuid.NAMESPACE_URL, key)),
    )
    if args:
        req.input.payloads.extend(await client.data_converter.encode(args))
    await client.workflow_service.signal_workflow_execution(req, retry=True)


def _ask() -> None:
    """The workflow reached a wait that does not hold: send its answer, if it is a question."""
    from temporalio import workflow

    instance = workflow.instance()
    with _lock:
        rank = _ranks.get(instance, 0) + 1
        _ranks[instance] = rank
        worker = _worker[0] if _worker else None
    if workflow.unsafe.is_replaying():
        return  # asked and answered before this task: the signal is in the history
    from temporalio.workflow._definition import _Definition

    signals = [n for n in _Definition.must_from_class(type(instance)).signals if n is not None]
    if not signals or worker is None:
        return
    info = workflow.info()
    with workflow.unsafe.sandbox_unrestricted():  # the person's side: files and the network
        _answer(info.workflow_id, info.run_id, rank, signals, worker)


def _answer(workflow_id: str, run_id: str, rank: int, signals: list[str], worker: tuple[Any, Any]) -> None:
    import asyncio

    key = wait_key(workflow_id, run_id, rank)
    values = _answers.answers_for([key])
    if values is None:
        _answers.none_left("temporal", f"workflow {workflow_id} waits (wait #{rank})")
        return
    name, args = signal_for(values[0], signals)
    client, loop = worker
    sent = asyncio.run_coroutine_threadsafe(_signal(client, workflow_id, run_id, name, args, key), loop)
    sent.result(timeout=_SEND_TIMEOUT_S)


def wrap_wait_condition(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    async def wait_condition(fn: Callable[[], bool], *args: Any, **kwargs: Any) -> None:
        if not fn():
            _ask()
        await orig(fn, *args, **kwargs)

    return wait_condition
