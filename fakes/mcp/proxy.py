"""The counting proxy: a user's own stdio MCP server behind it, every ``tools/call`` recorded.

The agent launches ``python -m killdrill.fakes.mcp --proxy NAME -- CMD...`` where it launched
``CMD...``; the proxy starts ``CMD`` and copies the bytes of every message both ways unchanged
(it parses a copy, never re-serializes: it cannot change a call or an answer).  When the server
answers a ``tools/call``, the proxy records the call in the ledger as provider ``NAME``, op the
tool's name, payload the arguments, then announces ``during:NAME.TOOL`` (the server did it, the
caller has not heard), then forwards the answer.

``NAME`` is undeclared (a declared provider's name is refused), so the verdict judges it as a
plain non-idempotent effect (``killdrill.providers``): every answered call counts, nothing is
converged.  What the server itself did (its database) stays the user's; what the proxy can
see is the answer:

- a JSON-RPC error or a result with ``isError``: recorded ``failed`` (did not land);
- with ``--key TOOL=ARG``, a call carrying ``ARG``: that value is the call's key (not part of
  the payload, as a Stripe key is not);
- a replay is judged by what was done, never by the answer's bytes: with ``--result
  TOOL=FIELD`` the answer's ``FIELD`` (``booking_id``, ``booking.id``) names the effect, and an
  answer naming one already recorded is the server replaying it (``replayed``), one naming a new
  one is a new effect, key or not.  Without it, under a key, an answer that says what the first
  answer under the key said is a replay, read without what a replay adds by habit
  (:data:`REPLAY_NOISE`: ``replayed``, ``idempotent_replayed``, the time it was served, ...);
  a different one is a new effect: the server did it again;
- otherwise every answered call landed (``created``).

A call's runtime context (``_meta``'s ``killdrill/context``, added by the agent's bootstrap) is
recorded with it, as an in-process call records its caller's.

Standard library only: the proxy needs no ``mcp`` package.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any

from killdrill.agent import CONTEXT_META, boundary
from killdrill.canonical import canonical_json
from killdrill.fakes.handle import Fakes, connect
from killdrill.fakes.mcp.tools import MAX_LINE
from killdrill.providers import registered
from killdrill.records import CREATED, FAILED, REPLAYED

__all__ = ["REPLAY_NOISE", "CountingProxy", "parse_keys", "run_proxy"]

REPLAY_NOISE = frozenset(
    {
        "replayed", "idempotent_replayed", "idempotency_replayed", "is_replay", "replay",
        "was_replayed", "deduplicated", "deduped", "duplicate", "cached", "from_cache",
        "timestamp", "served_at", "responded_at", "answered_at", "server_time", "request_time",
        "now", "_meta",
    }
)  # fmt: skip
"""Fields a server's replayed answer adds or changes by habit, not by doing anything: left out
(at any depth) when the proxy compares an answer with the first one under its key."""


def parse_keys(items: Sequence[str], option: str = "--key") -> dict[str, str]:
    """``["book=request_id"]`` -> ``{"book": "request_id"}``; ValueError names a malformed item."""
    keys: dict[str, str] = {}
    what = "its key" if option == "--key" else "the field of its answer naming what it did"
    for item in items:
        tool, sep, arg = item.partition("=")
        if not sep or not tool or not arg:
            shape = "TOOL=ARG" if option == "--key" else "TOOL=FIELD"
            raise ValueError(f"{option} {item!r}: expected {shape} ({what})")
        keys[tool] = arg
    return keys


def check_name(name: str) -> None:
    """A provider name the ledger and the ``during:`` grammar can carry, that no fake declares."""
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"--proxy {name!r}: the provider name must be an identifier (letters, digits, _)")
    if name in registered():
        raise ValueError(
            f"--proxy {name!r}: a declared provider has that name; choose another (e.g. {name}_mcp)"
        )


class CountingProxy:
    """Records the answered ``tools/call`` requests of one connection (see the module docstring)."""

    def __init__(
        self,
        name: str,
        keys: Mapping[str, str],
        fakes: Fakes,
        caller_pid: int,
        results: Mapping[str, str] | None = None,
    ) -> None:
        self.name, self.keys, self.fakes, self.caller_pid = name, dict(keys), fakes, caller_pid
        self.results = dict(results or {})
        self._pending: dict[str, tuple[str, Any]] = {}
        self._contexts: dict[str, dict[str, Any]] = {}  # a pending call's runtime context (its _meta)
        self._lock = threading.Lock()

    def client_message(self, line: bytes) -> None:
        """Note a ``tools/call`` request the client sends (its id, tool and arguments)."""
        for msg in _messages(line):
            if msg.get("method") == "tools/call" and "id" in msg:
                params = msg.get("params")
                params = params if isinstance(params, dict) else {}
                meta = params.get("_meta")
                context = meta.get(CONTEXT_META) if isinstance(meta, dict) else None
                with self._lock:
                    self._pending[_id(msg["id"])] = (str(params.get("name")), params.get("arguments"))
                    if isinstance(context, dict) and context:
                        self._contexts[_id(msg["id"])] = context

    def client_oversized(self, head: bytes) -> None:
        """A client message too large to read whole: passed on uncounted, and said (never silently)."""
        print(
            f"killdrill: MCP proxy {self.name}: a client message of more than {MAX_LINE} bytes passed"
            " through unread; a tools/call in it is not counted",
            file=sys.stderr,
            flush=True,
        )

    def server_oversized(self, head: bytes) -> None:
        """An answer too large to read whole: the call it answers (its id read from its first
        bytes) is recorded as done, its answer unread."""
        found = _HEAD_ID.search(head)
        if found is None:
            return
        with self._lock:
            call = self._pending.pop(_id(json.loads(found.group(1))), None)
            context = self._contexts.pop(_id(json.loads(found.group(1))), None)
        if call is not None:
            self.record(call[0], call[1], {"result": {"unread": f"more than {MAX_LINE} bytes"}}, context)
            boundary(f"during:{self.name}.{call[0]}")

    def server_message(self, line: bytes) -> None:
        """Record the ``tools/call`` this line answers, then announce ``during:`` (before it is forwarded)."""
        for msg in _messages(line):
            if "method" in msg or "id" not in msg or not ("result" in msg or "error" in msg):
                continue
            with self._lock:
                call = self._pending.pop(_id(msg["id"]), None)
                context = self._contexts.pop(_id(msg["id"]), None)
            if call is not None:
                self.record(call[0], call[1], msg, context)
                boundary(f"during:{self.name}.{call[0]}")

    def record(
        self, tool: str, arguments: Any, answer: Mapping[str, Any], context: dict[str, Any] | None = None
    ) -> None:
        payload = dict(arguments) if isinstance(arguments, dict) else {"arguments": arguments}
        key_arg = self.keys.get(tool)
        key = None
        if key_arg is not None and key_arg in payload:
            value = payload.pop(key_arg)
            key = value if isinstance(value, str) else canonical_json(value)
        result = answer.get("result")
        failed = "error" in answer or not isinstance(result, dict) or bool(result.get("isError"))
        with self.fakes.ledger.transaction() as tx:
            tx.context = context
            if failed:
                tx.record(self.name, tool, key, payload, FAILED, None, self.fakes.attempt, self.caller_pid)
                return
            assert isinstance(result, dict)
            identity = self.identity(tool, key, result)
            if identity is not None:
                digest = hashlib.sha256(identity.encode()).hexdigest()[:20]
                effect_id = f"{self.name}_{digest}"
                outcome = REPLAYED if tx.get_effect(self.name, effect_id) is not None else CREATED
            else:
                effect_id, outcome = tx.next_id(self.name), CREATED
            if outcome == CREATED:
                tx.put_effect(self.name, effect_id, {"tool": tool, "result": result}, ref=key)
            tx.record(self.name, tool, key, payload, outcome, effect_id, self.fakes.attempt, self.caller_pid)

    def identity(self, tool: str, key: str | None, result: Mapping[str, Any]) -> str | None:
        """What the answer says was done, the same for a replay as for the first answer; None: a
        new effect whatever it says (no key and no ``--result`` field in the answer)."""
        answer = _answer(result)
        field = self.results.get(tool)
        if field is not None:
            value = _field(answer, field)
            if value is not None:
                return f"{tool}\0result\0{canonical_json(value)}"
        if key is None:
            return None
        return f"{tool}\0{key}\0{canonical_json(_without_noise(answer))}"


def _answer(result: Mapping[str, Any]) -> Any:
    """The answer's value: its structured content, else its text content read as JSON."""
    if isinstance(result.get("structuredContent"), dict):
        return result["structuredContent"]
    content = result.get("content")
    if isinstance(content, list):
        texts = [c.get("text") for c in content if isinstance(c, dict) and c.get("type") == "text"]
        if len(texts) == 1 and isinstance(texts[0], str):
            try:
                return json.loads(texts[0])
            except (ValueError, RecursionError):
                return texts[0]
        return content
    return {k: v for k, v in result.items() if k != "_meta"}


def _field(answer: Any, path: str) -> Any:
    """``answer``'s field ``path`` (``booking_id``, ``booking.id``); None when it has none."""
    for part in path.split("."):
        if not isinstance(answer, dict):
            return None
        answer = answer.get(part)
    return answer


def _without_noise(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_noise(v) for k, v in value.items() if k not in REPLAY_NOISE}
    if isinstance(value, list):
        return [_without_noise(v) for v in value]
    return value


def _id(value: Any) -> str:
    return canonical_json(value)


def _messages(line: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages of one line (a batch is a list); nothing for what is not JSON."""
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return []
    items = doc if isinstance(doc, list) else [doc]
    return [m for m in items if isinstance(m, dict)]


_HEAD_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)')


def _pump(source: IO[bytes], sink: IO[bytes], note: Any, oversized: Any = None) -> None:
    """Copy ``source`` to ``sink`` line by line, unchanged; ``note(line)`` first; close ``sink`` at
    EOF.  A line over :data:`MAX_LINE` bytes is passed on in chunks, never held whole (a 50 MB
    line was read into memory whole): ``oversized(head)`` is told its first chunk instead."""
    try:
        while True:
            line = source.readline(MAX_LINE + 1)
            if not line:
                return
            if len(line) <= MAX_LINE or line.endswith(b"\n"):
                note(line)
                sink.write(line)
                sink.flush()
                continue
            if oversized is not None:
                oversized(line[:4096])
            sink.write(line)
            while not line.endswith(b"\n"):
                line = source.readline(1 << 16)
                if not line:
                    break
                sink.write(line)
            sink.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        try:
            sink.close()
        except OSError:
            pass


def run_proxy(
    name: str,
    keys: Mapping[str, str],
    command: Sequence[str],
    *,
    ledger: str | None = None,
    results: Mapping[str, str] | None = None,
) -> int:
    """Run ``command`` behind the proxy on this process's stdin/stdout; its exit status."""
    if not command:
        raise ValueError("--proxy NAME needs the server's command after --: --proxy NAME -- CMD [ARG ...]")
    check_name(name)
    proxy = CountingProxy(name, keys, connect(ledger), os.getppid(), results)
    try:
        server = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except OSError as exc:
        raise ValueError(f"--proxy {name}: cannot start {command[0]!r}: {exc.strerror or exc}") from None
    assert server.stdin is not None and server.stdout is not None
    upstream = threading.Thread(
        target=_pump,
        args=(sys.stdin.buffer, server.stdin, proxy.client_message, proxy.client_oversized),
        daemon=True,
    )
    upstream.start()
    _pump(server.stdout, sys.stdout.buffer, proxy.server_message, proxy.server_oversized)
    return server.wait()
