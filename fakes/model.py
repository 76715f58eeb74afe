"""The model fake on the HTTP fakes: OpenAI ``/v1/chat/completions`` and Anthropic ``/v1/messages``.

An agent that calls a model cannot run in a drill without one, and a real model is neither
free nor repeatable.  This fake answers from the user's script (``fakes/model_script.py``): the
reply is a function of the conversation (and, under ``--model-variance``, of the seed and the
attempt), so a resumed process asking the same question hears the same answer, and a process
that keys an effect on the model's wording is caught when variance changes it.  Tool-call and
response ids are new on every answer, as a real model's are (seeded: a reproduction gets the same
ones), and the ledger keeps the tool-call ids issued, so a key made of one is named as such.

Every drill serves these routes, with a script or without: its attempts' SDKs point here and
never at a real model.  Without a script a model call is answered 400 with what was asked and
recorded (outcome ``rejected``, payload ``unscripted``), so the drill says it in one line.

Each answered request is recorded in the ledger as a call of provider ``model`` (op ``chat`` or
``messages``) with outcome ``answered``: a call, never an effect (the verdict ignores it), whose
tokens the report adds up to show how much model work a resume re-spent.  As for any recorded
call, ``during:model.chat`` / ``during:model.messages`` is announced after the record is
committed and before the answer is sent.  Both APIs stream (``"stream": true``) as server-sent
events built from the same reply.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from killdrill.agent import ControlChannelError
from killdrill.fakes.model_script import (
    Conversation,
    Reply,
    Script,
    ScriptError,
    Turn,
    tool_schemas_text,
)
from killdrill.providers import Operation, ProviderSpec, register
from killdrill.records import ANSWERED, REJECTED

if TYPE_CHECKING:
    from killdrill.fakes.serving import Binding, ServerFakes

__all__ = [
    "MODEL_PROVIDER",
    "ROUTES",
    "UNSCRIPTED",
    "ModelFake",
    "ModelHandler",
    "ModelServer",
    "anthropic_conversation",
    "openai_conversation",
]

MODEL_PROVIDER = "model"
register(
    ProviderSpec(
        MODEL_PROVIDER, (Operation("chat"), Operation("messages"), Operation("responses")), call_only=True
    )
)  # responses: the Responses API, fakes/model_responses.py
# A model's answers are work the report adds up, never effects: the verdict does not judge them.


class ModelServer(Protocol):
    """What the model's routes read of the HTTP fakes' server (:mod:`killdrill.fakes.http`)."""

    model: ModelFake | None
    model_asked: dict[tuple[str, int, str], int]  # (thread, attempt, conversation) -> times asked


class ModelHandler(Protocol):
    """What the model's routes use of the HTTP fakes' request handler (:mod:`killdrill.fakes.http`,
    which serves them: this module does not import it)."""

    @property
    def server(self) -> ModelServer: ...

    @property
    def wfile(self) -> BinaryIO: ...

    def fakes(self) -> tuple[ServerFakes, Binding]: ...

    def send_response(self, code: int, message: str | None = None) -> None: ...

    def send_header(self, keyword: str, value: str) -> None: ...

    def end_headers(self) -> None: ...

    def hang_up(self) -> None: ...


@dataclass(frozen=True)
class ModelFake:
    """What the HTTP fakes answer model requests with: a script and an optional variance seed."""

    script: Script | None = None
    variance: int | None = None


# ---- requests into conversations ---------------------------------------------------------------
def _parts_text(content: Any) -> str:
    """A message's text: a string, or the text of its parts/blocks (images and the like skipped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, Mapping) and part.get("type") == "tool_result":
                texts.append(_parts_text(part.get("content")))
        return "\n".join(texts)
    return json.dumps(content, sort_keys=True)


def openai_conversation(body: Mapping[str, Any]) -> Conversation:
    """Chat Completions messages (system/developer, user, assistant with tool_calls, tool)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ScriptError("messages: expected a non-empty list")
    names: dict[str, str] = {}
    turns: list[Turn] = []
    for m in messages:
        if not isinstance(m, Mapping):
            raise ScriptError("messages: every message must be an object")
        role = str(m.get("role") or "")
        text = _parts_text(m.get("content"))
        if role == "assistant":
            called = []
            for c in m.get("tool_calls") or ():
                fn = c.get("function") or {}
                names[str(c.get("id"))] = str(fn.get("name"))
                called.append(str(fn.get("name")))
            turns.append(Turn("assistant", text, tool_calls=tuple(called)))
        elif role in ("tool", "function"):
            tool = names.get(str(m.get("tool_call_id"))) or m.get("name")
            turns.append(Turn("tool", text, tool=str(tool) if tool else None))
        else:
            turns.append(Turn("system" if role == "developer" else role, text))
    return Conversation(tuple(turns), tool_schemas_text(body.get("tools")))


def anthropic_conversation(body: Mapping[str, Any]) -> Conversation:
    """Messages API: ``system`` apart, tool_use blocks in assistant turns, tool_result in user turns."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ScriptError("messages: expected a non-empty list")
    turns: list[Turn] = []
    if body.get("system"):
        turns.append(Turn("system", _parts_text(body["system"])))
    names: dict[str, str] = {}
    for m in messages:
        if not isinstance(m, Mapping):
            raise ScriptError("messages: every message must be an object")
        role, content = str(m.get("role") or ""), m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        if role == "assistant":
            called = []
            for b in blocks:
                if isinstance(b, Mapping) and b.get("type") == "tool_use":
                    names[str(b.get("id"))] = str(b.get("name"))
                    called.append(str(b.get("name")))
            texts = [b for b in blocks if not (isinstance(b, Mapping) and b.get("type") == "tool_use")]
            turns.append(Turn("assistant", _parts_text(texts), tool_calls=tuple(called)))
            continue
        results = [b for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_result"]
        for b in results:
            tool = names.get(str(b.get("tool_use_id")))
            turns.append(Turn("tool", _parts_text(b.get("content")), tool=tool))
        rest = [b for b in blocks if b not in results]
        if rest or not results:
            turns.append(Turn(role, _parts_text(rest)))
    return Conversation(tuple(turns), tool_schemas_text(body.get("tools")))


# ---- replies into responses --------------------------------------------------------------------
def _reply_id(prefix: str, reply: Reply, salt: str) -> str:
    seed = json.dumps([reply.nonce, [c.id for c in reply.tool_calls], reply.content, salt])
    return prefix + hashlib.sha256(seed.encode()).hexdigest()[:24]


def _openai_body(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{c.id}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in reply.tool_calls
        ]
    return {
        "id": _reply_id("chatcmpl-", reply, "openai"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": _openai_usage(reply),
        "system_fingerprint": None,
    }


def _openai_usage(reply: Reply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def _openai_stream(reply: Reply, model: str, usage: bool) -> bytes:
    """The same reply as Chat Completions chunks: role, text, each tool call, finish, usage, [DONE]."""
    full = _openai_body(reply, model)
    head = {"id": full["id"], "object": "chat.completion.chunk", "created": full["created"], "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    events = [chunk({"role": "assistant", "content": ""})]
    if reply.content:
        events.append(chunk({"content": reply.content}))
    for i, call in enumerate(full["choices"][0]["message"].get("tool_calls") or ()):
        fn = call["function"]
        start = {
            "index": i,
            "id": call["id"],
            "type": "function",
            "function": {"name": fn["name"], "arguments": ""},
        }
        events.append(chunk({"tool_calls": [start]}))
        events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]}))
    events.append(chunk({}, full["choices"][0]["finish_reason"]))
    if usage:
        events.append({**head, "choices": [], "usage": full["usage"]})
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


def _anthropic_body(reply: Reply, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    content.extend(
        {"type": "tool_use", "id": f"toolu_{c.id}", "name": c.name, "input": c.arguments}
        for c in reply.tool_calls
    )
    return {
        "id": _reply_id("msg_", reply, "anthropic"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": reply.completion_tokens},
    }


def _anthropic_stream(reply: Reply, model: str) -> bytes:
    """The same reply as Messages API events: message_start, each block's start/delta/stop, the end."""
    full = _anthropic_body(reply, model)
    start = {**full, "content": [], "stop_reason": None, "usage": {**full["usage"], "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for i, block in enumerate(full["content"]):
        opened: dict[str, Any]
        if block["type"] == "text":
            opened = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(
            ("content_block_start", {"type": "content_block_start", "index": i, "content_block": opened})
        )
        events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": full["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": full["usage"]["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


# ---- the routes --------------------------------------------------------------------------------
def _send_bytes(handler: ModelHandler, status: int, content_type: str, data: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _openai_error(handler: ModelHandler, status: int, message: str) -> None:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
    _send_bytes(handler, status, "application/json", json.dumps(body).encode())


def _anthropic_error(handler: ModelHandler, status: int, message: str) -> None:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    _send_bytes(handler, status, "application/json", json.dumps(body).encode())


def _serve(
    handler: ModelHandler,
    raw: bytes,
    op: str,
    parse: Callable[[Mapping[str, Any]], Conversation],
    error: Callable[[ModelHandler, int, str], None],
) -> Reply | None:
    """Parse, answer from the script, record the call, announce ``during:``; None if answered already."""
    fake: ModelFake | None = getattr(handler.server, "model", None)
    try:
        body = json.loads(raw or b"{}")
        if not isinstance(body, Mapping):
            raise ValueError("not an object")
    except (ValueError, RecursionError):
        error(handler, 400, "the body must be a JSON object")
        return None
    fakes, binding = handler.fakes()
    if fake is None or fake.script is None:
        _unscripted(handler, op, body, parse, error)
        return None
    try:
        conv = parse(body)
        reply = fake.script.answer(
            conv, variance=fake.variance, attempt=fakes.attempt, asked=_asked(handler, conv, fakes.attempt)
        )
    except ScriptError as exc:
        error(handler, 400, f"killdrill: {exc}")
        return None
    payload = {
        "model": str(body.get("model") or fake.script.model),
        "rule": reply.rule,
        "digest": reply.digest,
        "messages": len(body.get("messages") or ()),
        "tool_calls": [c.name for c in reply.tool_calls],
        "ids": [c.id for c in reply.tool_calls],  # issued by the model: a key made of one is caught
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "stream": bool(body.get("stream")),
    }
    with fakes.ledger.transaction() as tx:
        tx.record(MODEL_PROVIDER, op, None, payload, ANSWERED, None, fakes.attempt, fakes.pid)
    if binding.control is not None:
        try:
            binding.control.send(f"during:{MODEL_PROVIDER}.{op}")
        except ControlChannelError:
            handler.hang_up()  # the supervisor killed the caller: nobody is left to answer
            return None
    return reply


_asked_lock = threading.Lock()


def _asked(handler: ModelHandler, conv: Conversation, attempt: int) -> int:
    """How many times this attempt asked this conversation before: a retry gets new ids too."""
    binding = handler.fakes()[1]
    with _asked_lock:
        counts = handler.server.model_asked
        key = (binding.thread, attempt, conv.digest)
        n = counts[key] = counts.get(key, -1) + 1
    return n


UNSCRIPTED = "the drill has no --model-script"
"""The start of the answer to, and of the ledger's record of, a model call the drill cannot answer."""


def _unscripted(
    handler: ModelHandler,
    op: str,
    body: Mapping[str, Any],
    parse: Callable[[Mapping[str, Any]], Conversation],
    error: Callable[[ModelHandler, int, str], None],
) -> None:
    """A model call in a drill without a script: recorded (the drill reports it in one line) and
    answered 400 with what was asked, never passed on to a real model."""
    try:
        last = parse(body).last()
        said = f"{last.role} {_clip(last.text)!r}" if last is not None else "nothing"
    except ScriptError:
        said = "a request the fake cannot read"
    asked = f"{MODEL_PROVIDER}.{op} (model {str(body.get('model') or '?')!r}; the last message is {said})"
    fakes, _ = handler.fakes()
    with fakes.ledger.transaction() as tx:
        tx.record(MODEL_PROVIDER, op, None, {"unscripted": asked}, REJECTED, None, fakes.attempt, fakes.pid)
    error(handler, 400, f"killdrill: {UNSCRIPTED} to answer {asked}: pass --model-script FILE")


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _chat_completions(handler: ModelHandler, raw: bytes) -> None:
    reply = _serve(handler, raw, "chat", openai_conversation, _openai_error)
    if reply is None:
        return
    body = json.loads(raw)
    # _serve answered, so the server has a model fake with a script
    model = str(body.get("model") or handler.server.model.script.model)  # type: ignore[union-attr]
    if body.get("stream"):
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        _send_bytes(handler, 200, "text/event-stream", _openai_stream(reply, model, usage))
    else:
        _send_bytes(handler, 200, "application/json", json.dumps(_openai_body(reply, model)).encode())


def _messages(handler: ModelHandler, raw: bytes) -> None:
    reply = _serve(handler, raw, "messages", anthropic_conversation, _anthropic_error)
    if reply is None:
        return
    body = json.loads(raw)
    # _serve answered, so the server has a model fake with a script
    model = str(body.get("model") or handler.server.model.script.model)  # type: ignore[union-attr]
    if body.get("stream"):
        _send_bytes(handler, 200, "text/event-stream", _anthropic_stream(reply, model))
    else:
        _send_bytes(handler, 200, "application/json", json.dumps(_anthropic_body(reply, model)).encode())


ROUTES: dict[str, Callable[[ModelHandler, bytes], None]] = {
    "/v1/chat/completions": _chat_completions,
    "/v1/messages": _messages,
}
"""POST routes the HTTP fakes serve for the model (registered in ``fakes/http.py``)."""
