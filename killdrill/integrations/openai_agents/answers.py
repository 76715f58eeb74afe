"""The OpenAI Agents SDK's scripted human (``--answer``): a run that returns with pending tool
approvals (``result.interruptions``: tools with ``needs_approval``) is approved or rejected and run
on, as the SDK's documented loop does (``state = result.to_state()``, ``state.approve(item)`` or
``state.reject(item)``, ``Runner.run(agent, state, ...)``).

Part of :mod:`killdrill.integrations.openai_agents`, which wraps ``AgentRunner.run`` with
:func:`wrap_run` (``Runner.run`` and ``Runner.run_sync`` both go through it; a streamed run,
``Runner.run_streamed``, is not answered).  An answer approves when it is ``true`` or one of the
words ``approve``/``approved``/``yes``/``y``, rejects when it is ``false`` or
``reject``/``rejected``/``no``/``n``; a ``{"approve": BOOL, "message": TEXT}`` answer rejects with
that message sent to the model.  An approval is known across kills by its tool and arguments (the
call id is the model's: a resume that asks the model again gets a new one).

An approval left with no answer is written to the thread view
(``<workdir>/.killdrill/thread-view-<attempt>-<pid>-agents.json``): the drill says in one line which
tool waits and that ``--answer`` answers it, whether the agent then exits or fails on ``input()``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from typing import Any

from killdrill import envvars
from killdrill.integrations import _answers

__all__ = ["approval_key", "decision", "wrap_run"]

_YES = {"approve", "approved", "yes", "y", "true"}
_NO = {"reject", "rejected", "no", "n", "false"}


def approval_key(item: Any) -> str:
    """The approval's identity across kills: its tool and arguments."""
    return f"agents:{getattr(item, 'name', None)}:{getattr(item, 'arguments', None)}"


def decision(value: Any) -> tuple[bool, str | None]:
    """``(approve, rejection message)`` of one answer (ValueError for one that says neither)."""
    if isinstance(value, dict) and isinstance(value.get("approve"), bool):
        message = value.get("message")
        return value["approve"], None if message is None else str(message)
    if isinstance(value, bool):
        return value, None
    word = str(value).strip().lower()
    if word in _YES or word in _NO:
        return word in _YES, None
    raise ValueError(
        f"--answer {value!r} for a tool approval: expected true/approve or false/reject "
        '(or {"approve": false, "message": TEXT})'
    )


def _record_unanswered(items: list[Any]) -> None:
    workdir = os.environ.get(envvars.WORKDIR)
    if not workdir:
        return
    attempt = os.environ.get(envvars.ATTEMPT, "0")
    path = os.path.join(workdir, ".killdrill", f"thread-view-{attempt}-{os.getpid()}-agents.json")
    waiting = [
        {"node": str(getattr(i, "name", "?")), "kind": "tool", "value": str(getattr(i, "arguments", ""))}
        for i in items
    ]
    view = {"integration": "openai_agents", "threads": {"run": {"pending": [], "interrupts": waiting}}}
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(view, fh)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def wrap_run(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``AgentRunner.run`` that answers each round of pending approvals with the next answers."""

    @functools.wraps(orig)
    async def run(self: Any, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        result = await orig(self, starting_agent, input, **kwargs)
        while getattr(result, "interruptions", None):
            items = list(result.interruptions)
            values = _answers.answers_for([approval_key(i) for i in items]) if _answers.configured() else None
            if values is None:
                _record_unanswered(items)
                return result
            state = result.to_state()
            for item, value in zip(items, values, strict=True):
                approve, message = decision(value)
                if approve:
                    state.approve(item)
                else:
                    state.reject(item, rejection_message=message)
            result = await orig(self, starting_agent, state, **kwargs)
        return result

    run.__killdrill_wrapped__ = True  # type: ignore[attr-defined]
    return run
