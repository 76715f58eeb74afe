"""The model fake's OpenAI Responses API: ``POST /v1/responses``, plain and streamed.

The Responses API is the default of the OpenAI Agents SDK and of ``client.responses.create``:
without it an unedited Agents SDK agent gets a 404 from the fakes.  A request is reduced to the
same :class:`Conversation` as a Chat Completions request, so one script answers both APIs alike:
``instructions`` and system/developer messages are system turns, a ``function_call`` item is the
assistant calling that tool (consecutive assistant items, a message and its function calls, are
one assistant turn, as one Chat Completions message is), a ``function_call_output`` item is the
tool's result.  ``previous_response_id`` chains onto a response this fake answered earlier in the
drill (kept in memory, as the real API keeps responses unless ``store`` is false); an id it never
answered is a 400, as the real API says it.

Each answer is recorded in the ledger as a call of provider ``model``, op ``responses``
(``during:model.responses`` is its kill point), with the same script rules, variance and
re-spent-work accounting as ``/v1/chat/completions``.  ``stream: true`` answers with the event
stream the ``openai`` SDK parses (``response.created`` ... ``response.completed``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from killdrill.fakes import model as _model
from killdrill.fakes.model_script import Conversation, Reply, ScriptError, Turn, tool_schemas_text

__all__ = ["OP", "ROUTES", "responses_body", "responses_conversation", "responses_stream"]

OP = "responses"
_STORE_MAX = 4096
_store: OrderedDict[str, list[Any]] = OrderedDict()  # response id -> its input and output items
_store_lock = threading.Lock()
_ASSISTANT_ITEMS = ("message", "function_call")


# ---- requests into conversations ---------------------------------------------------------------
def _items(value: Any) -> list[Any]:
    """``input`` (or list ``instructions``) as items: a string is one user message."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list):
        return list(value)
    raise ScriptError("input: expected a string or a list of items")


def _kind(item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind or "")


def _turns(items: Sequence[Any]) -> list[Turn]:
    """Items as turns; a run of assistant items (message, function calls) is one assistant turn."""
    names: dict[str, str] = {}
    turns: list[Turn] = []
    for item in items:
        if not isinstance(item, Mapping):
            raise ScriptError("input: every item must be an object")
        kind = _kind(item)
        role = str(item.get("role") or "")
        assistant = (kind == "message" and role == "assistant") or kind == "function_call"
        if assistant:
            text, called = "", cast("tuple[str, ...]", ())
            if kind == "message":
                text = _model._parts_text(item.get("content"))
            else:
                names[str(item.get("call_id"))] = str(item.get("name"))
                called = (str(item.get("name")),)
            prev = turns[-1] if turns else None
            if prev is not None and prev.role == "assistant":
                joined = "\n".join(t for t in (prev.text, text) if t)
                turns[-1] = Turn("assistant", joined, tool_calls=prev.tool_calls + called)
            else:
                turns.append(Turn("assistant", text, tool_calls=called))
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _model._parts_text(output)
            tool = names.get(str(item.get("call_id")))
            turns.append(Turn("tool", text, tool=tool))
        elif kind == "message":
            text = _model._parts_text(item.get("content"))
            turns.append(Turn("system" if role in ("system", "developer") else role, text))
        # reasoning, item_reference and the built-in tools' items carry nothing a script matches
    return turns


def _history(body: Mapping[str, Any]) -> list[Any]:
    """The items before this request's input: those of ``previous_response_id``'s chain."""
    previous = body.get("previous_response_id")
    if previous is None:
        return []
    if body.get("conversation") is not None:
        raise ScriptError("previous_response_id and conversation cannot be used together")
    with _store_lock:
        found = _store.get(str(previous))
        if found is not None:
            _store.move_to_end(str(previous))
    if found is None:
        raise ScriptError(f"Previous response with id {previous!r} not found.")
    return list(found)


def responses_conversation(body: Mapping[str, Any]) -> Conversation:
    """A Responses request (``instructions``, ``input`` items, ``previous_response_id``) as turns."""
    if body.get("conversation") is not None and body.get("previous_response_id") is None:
        raise ScriptError("the model fake does not serve the Conversations API: send the items as input")
    items = _history(body) + _items(body.get("input"))
    if not items:
        raise ScriptError("input: expected a string or a non-empty list of items")
    instructions = body.get("instructions")
    head = [Turn("system", instructions)] if isinstance(instructions, str) and instructions else []
    if isinstance(instructions, list):
        head = _turns(instructions)
    return Conversation(tuple(head + _turns(items)), tool_schemas_text(body.get("tools")))


# ---- replies into responses --------------------------------------------------------------------
def _output(reply: Reply, response_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if reply.content:
        out.append(
            {
                "id": "msg_" + hashlib.sha256(response_id.encode()).hexdigest()[:24],
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": reply.content, "annotations": [], "logprobs": []}
                ],
            }
        )
    for c in reply.tool_calls:
        out.append(
            {
                "id": f"fc_{c.id}",
                "type": "function_call",
                "status": "completed",
                "call_id": f"call_{c.id}",
                "name": c.name,
                "arguments": json.dumps(c.arguments),
            }
        )
    return out


def responses_body(reply: Reply, body: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The ``Response`` object of a reply: its output items, the request's settings echoed."""
    response_id = _model._reply_id("resp_", reply, "responses")
    now = int(time.time())
    return {
        "id": response_id,
        "object": "response",
        "created_at": now,
        "completed_at": now,
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "model": model,
        "output": _output(reply, response_id),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "user": None,
        "usage": {
            "input_tokens": reply.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": reply.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def responses_stream(full: Mapping[str, Any]) -> bytes:
    """The same response as the SDK's server-sent events, each numbered by ``sequence_number``."""
    events: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    pending = {**full, "status": "in_progress", "output": [], "usage": None, "completed_at": None}
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    for i, item in enumerate(full["output"]):
        where = {"item_id": item["id"], "output_index": i}
        opening = {**item, "status": "in_progress"}
        if item["type"] == "message":
            emit("response.output_item.added", output_index=i, item={**opening, "content": []})
            for j, part in enumerate(item["content"]):
                emit("response.content_part.added", **where, content_index=j, part={**part, "text": ""})
                emit("response.output_text.delta", **where, content_index=j, delta=part["text"], logprobs=[])
                emit("response.output_text.done", **where, content_index=j, text=part["text"], logprobs=[])
                emit("response.content_part.done", **where, content_index=j, part=part)
        else:
            args = item["arguments"]
            emit("response.output_item.added", output_index=i, item={**opening, "arguments": ""})
            emit("response.function_call_arguments.delta", **where, delta=args)
            emit("response.function_call_arguments.done", **where, name=item["name"], arguments=args)
        emit("response.output_item.done", output_index=i, item=item)
    emit("response.completed", response=full)
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def _remember(response_id: str, items: list[Any]) -> None:
    with _store_lock:
        _store[response_id] = items
        _store.move_to_end(response_id)
        while len(_store) > _STORE_MAX:
            _store.popitem(last=False)


# ---- the route ---------------------------------------------------------------------------------
def _responses(handler: _model.ModelHandler, raw: bytes) -> None:
    reply = _model._serve(handler, raw, OP, responses_conversation, _model._openai_error)
    if reply is None:
        return
    body = json.loads(raw)
    # _serve answered, so the server has a model fake with a script
    model = str(body.get("model") or handler.server.model.script.model)  # type: ignore[union-attr]
    full = responses_body(reply, body, model)
    if body.get("store", True) is not False:
        _remember(full["id"], _history(body) + _items(body.get("input")) + full["output"])
    if body.get("stream"):
        _model._send_bytes(handler, 200, "text/event-stream", responses_stream(full))
    else:
        _model._send_bytes(handler, 200, "application/json", json.dumps(full).encode())


ROUTES: dict[str, Callable[[_model.ModelHandler, bytes], None]] = {"/v1/responses": _responses}
"""POST routes of the Responses API (registered in ``fakes/http.py`` beside ``model.ROUTES``)."""
