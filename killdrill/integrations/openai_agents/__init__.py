"""OpenAI Agents SDK integration: kill points for every function tool of an unmodified agent.

Activated by the drill with ``--integration openai_agents`` (``KILLDRILL_INTEGRATIONS``; the
bootstrap calls :func:`activate` at interpreter start), or explicitly.  Activation never imports
the SDK (``agents``): an import hook patches it when the agent imports it.

Points emitted (``TOOL`` is the function tool's name as the model sees it: the function's name,
or ``name_override``; characters outside the kill-point grammar become ``_``):

``before:TOOL``
    the SDK is about to invoke the tool's function (after its input guardrails and the
    ``on_tool_start`` hooks).
``after:TOOL``
    the function returned (an exception the SDK turns into an error message for the model
    counts as returned), its output not yet saved: the SDK saves a turn's items in the session
    only after all of the turn's tools finished, so a kill here loses the model's call and the
    resume asks the model again.
``committed:TOOL``
    the session's ``add_items`` that holds this tool's output (a ``function_call_output`` item
    of a call that ran in this process) returned: the call and its output are durable, a resume
    continues after them.  One point per output saved, in the order of the items.
``committed:session``
    any ``add_items`` of the run returned (the request saved at the start, a turn's items, the
    final answer), after the ``committed:TOOL`` points of that save.  ``session`` is the SDK's
    own machinery, not a step of the agent (``INTEGRATION.internal_steps``).

Every session goes through the SDK's one writer (``session_persistence._session_add_items``),
so ``SQLiteSession``, ``SQLAlchemySession``, Redis and a user's own ``Session`` are all covered.
Without a session nothing is durable and no ``committed:`` point is emitted.

Tracing: the SDK exports traces to api.openai.com from a background thread; a drill must
neither leave the machine nor wait for that export at exit, so :func:`activate` sets
``OPENAI_AGENTS_DISABLE_TRACING=1`` unless the agent's environment says otherwise (the drill's
model fake sets it too).
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from killdrill.agent import boundary
from killdrill.integrations import Integration, Probe
from killdrill.integrations._imports import PatchOnImport
from killdrill.integrations.openai_agents.answers import wrap_run

if TYPE_CHECKING:
    pass

__all__ = ["INTEGRATION", "SESSION", "activate", "active", "deactivate", "point_name"]

SESSION = "session"
"""The name used by ``committed:session``."""

INTEGRATION = Integration(
    "openai_agents",
    title="OpenAI Agents SDK",
    aliases=("openai-agents",),
    distributions=("openai-agents",),  # it installs the top-level module ``agents``
    modules=("agents",),
    hint="function tool and session save",
    preload=("agents",),
    internal_steps=frozenset({SESSION}),
    probe=Probe(
        "killdrill.conform.probes.openai_agents_probe",
        order=4,
        distribution="openai-agents",
        extra="openai-agents",
        options={"model": True},
    ),
    examples=("killdrill.examples.billing_openai_agents",),
    answers=True,  # --answer: pending tool approvals (killdrill.integrations.openai_agents.answers)
)

TRACING_ENV = "OPENAI_AGENTS_DISABLE_TRACING"
_TOOL = "agents.tool"
_EXECUTION = "agents.run_internal.tool_execution"
_PERSISTENCE = "agents.run_internal.session_persistence"
_RUN = "agents.run"
_TARGETS = (_TOOL, _EXECUTION, _PERSISTENCE, _RUN)
_INVOKE = "_invoke_function_tool_with_metadata"
_ADD = "_session_add_items"
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.\-/\[\]]")
_RAN_MAX = 4096
_ran: dict[str, str] = {}  # call id -> point name of a tool whose function returned here
_lock = threading.RLock()


def point_name(tool_name: str) -> str:
    """The kill-point NAME of a function tool."""
    name = _BAD_CHARS.sub("_", tool_name)
    return name if name[:1] not in ("", ".", "-", "/", "[", "]") else f"_{name}"


def _remember(call_id: str, name: str) -> None:
    with _lock:
        if len(_ran) >= _RAN_MAX:  # outputs never saved (no session): forget the oldest
            _ran.pop(next(iter(_ran)), None)
        _ran[call_id] = name


def _saved_tools(items: Iterable[Any]) -> list[str]:
    """Point names of the tool outputs among ``items`` that ran in this process, in order."""
    out = []
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else getattr(item, "type", None)
        if kind != "function_call_output":
            continue
        call_id = item.get("call_id") if isinstance(item, dict) else getattr(item, "call_id", None)
        with _lock:
            name = _ran.pop(str(call_id), None)
        if name is not None:
            out.append(name)
    return out


# ---------------------------------------------------------------- patches


def _wrap_invoke(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    async def invoke(*args: Any, **kwargs: Any) -> Any:
        tool = kwargs.get("function_tool", args[0] if args else None)
        context = kwargs.get("context", args[1] if len(args) > 1 else None)
        name = point_name(str(getattr(tool, "name", "tool")))
        boundary(f"before:{name}")
        result = await orig(*args, **kwargs)
        boundary(f"after:{name}")
        call_id = getattr(context, "tool_call_id", None)
        if isinstance(call_id, str):
            _remember(call_id, name)
        return result

    invoke.__killdrill_wrapped__ = True  # type: ignore[attr-defined]
    return invoke


def _wrap_add(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    async def session_add_items(session: Any, items: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        result = await orig(session, items, *args, **kwargs)
        for name in _saved_tools(items):
            boundary(f"committed:{name}")
        boundary(f"committed:{SESSION}")
        return result

    session_add_items.__killdrill_wrapped__ = True  # type: ignore[attr-defined]
    return session_add_items


def _replace(owner: ModuleType, attr: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    current = getattr(owner, attr, None)
    if current is None or getattr(current, "__killdrill_wrapped__", False):
        return
    _hook.replace(owner, attr, wrap(current))


def _patch(module: ModuleType) -> None:
    """Patch one target module (right after it executes, or now if it was already imported).

    ``agents.tool`` is patched before ``tool_execution`` imports the function by name; when the
    SDK was imported before activation, ``tool_execution``'s own reference is patched instead."""
    with _lock:
        if module.__name__ in (_TOOL, _EXECUTION):
            _replace(module, _INVOKE, _wrap_invoke)
        elif module.__name__ == _PERSISTENCE:
            _replace(module, _ADD, _wrap_add)
        elif module.__name__ == _RUN:
            runner = module.AgentRunner
            if not getattr(runner.run, "__killdrill_wrapped__", False):
                _hook.replace(runner, "run", wrap_run(runner.run))


_hook = PatchOnImport(_TARGETS, _patch)
_originals = _hook.originals  # (owner, attribute) -> what was there before the patch


def activate() -> None:
    """Emit kill points for every function tool and session save in this process (idempotent)."""
    os.environ.setdefault(TRACING_ENV, "1")
    with _lock:
        _hook.install()


def active() -> bool:
    """True when :func:`activate` ran (patched, or waiting for the SDK's import)."""
    return _hook.active


def deactivate() -> None:
    """Undo :func:`activate` (for in-process tests); the tracing setting stays as it is."""
    with _lock:
        _hook.undo()
        _ran.clear()
