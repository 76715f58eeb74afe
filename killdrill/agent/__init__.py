"""Agent-side API: ``boundary(point)`` and ``node(name)``; the runtime context of the code now running.

Outside a drill (no ``KILLDRILL_CONTROL`` in the environment) both are no-ops that
cost one global lookup and never touch the network or the disk.  Under a drill,
``boundary`` sends the point to the supervisor over the attempt's private control
channel and *blocks until the supervisor answers*: when the supervisor decides to
kill at this point, it never answers, so the kill lands exactly here, whatever the
timing of the machine.

It blocks only where the supervisor may act: ``KILLDRILL_WAIT_AT`` (a JSON list) names the
points to wait at; at every other point the message goes one way, stamped with the agent's
monotonic clock, and the agent runs on (a round trip was ~50 us, a third of a clean
1,000-payment run).  The supervisor sets it to ``[]`` for an attempt with no point to
act on (a clean run, a resume, a timed kill) and leaves it out otherwise: without it every point
waits.  A connection's first message always waits, so the supervisor has accepted and checked
the connection while its process is alive.

The environment is read lazily at the first call (not at import), so a process
that imports killdrill before the supervisor's variables are set still works.
Each thread, and each forked child, gets its own connection: a hold at one thread's
boundary does not stall another thread, and a child never reads its parent's reply.

Layer: agent (above records and errors); standard library only, since every agent imports it at
start.  The ``sitecustomize`` the supervisor puts first on the agent's ``PYTHONPATH`` lives with
the integrations it activates (``killdrill/integrations/_bootstrap``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

from killdrill import envvars

__all__ = [
    "CONTEXT_HEADER",
    "CONTEXT_META",
    "ControlChannelError",
    "ControlClient",
    "armed",
    "boundary",
    "in_runtime",
    "node",
    "replays",
    "runtime_context",
    "wire_context",
    "wire_context_of",
]

F = TypeVar("F", bound=Callable[..., Any])


class ControlChannelError(RuntimeError):
    """The supervisor rejected a message or vanished while the agent waited at a point."""


_GO = b'{"go": true}\n'
"""The supervisor's answer that lets a boundary go on (killdrill.process.control writes exactly this)."""
_MESSAGES: dict[str, bytes] = {}
_ONE_WAY: dict[str, bytes] = {}  # the start of a one-way message, per point; its time is appended


def _one_way(point: str) -> bytes:
    """``{"point": P, "wait": false, "at": MONOTONIC}``: a boundary nobody holds or kills at."""
    head = _ONE_WAY.get(point)
    if head is None:
        head = b'{"point": ' + json.dumps(point).encode() + b', "wait": false, "at": '
        if len(_ONE_WAY) < 4096:
            _ONE_WAY[point] = head
    return head + repr(time.monotonic()).encode() + b"}\n"


class ControlClient:
    """A view of one attempt's control channel: an address, a token, a socket per thread.

    Agents get one from the environment; the HTTP fakes (which run in the harness) build one
    from the address the supervisor hands them, to announce ``during:`` points.
    """

    def __init__(
        self, address: str, token: str, *, persistent: bool = True, wait_at: frozenset[str] | None = None
    ) -> None:
        self.address = address
        self.token = token
        self.persistent = persistent  # False: a connection per call (short-lived server threads)
        self.wait_at = wait_at  # None: wait at every point; else only there (and on a new connection)
        self.local = threading.local()

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        addr = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            sock.connect(addr)
        except OSError as exc:
            sock.close()
            raise ControlChannelError(
                f"killdrill: cannot reach the supervisor at {self.address}: {exc}"
            ) from exc
        hello = {"token": self.token, "pid": os.getpid(), "thread": threading.current_thread().name}
        sock.sendall(json.dumps(hello).encode() + b"\n")
        self.local.sock = sock
        self.local.reader = sock.makefile("rb")
        return sock

    def send(self, point: str) -> None:
        sock = getattr(self.local, "sock", None)
        if sock is None:
            sock = self._connect()  # and this first message waits (see the module's docstring)
        elif self.wait_at is not None and point not in self.wait_at:
            try:
                sock.sendall(_one_way(point))
            except BaseException as exc:  # a partial line would corrupt the next message
                self._drop()
                if isinstance(exc, OSError) and exc.errno is not None:
                    raise ControlChannelError(f"killdrill: control channel broke at {point}: {exc}") from exc
                raise
            return
        message = _MESSAGES.get(point)
        if message is None:
            message = json.dumps({"point": point}).encode() + b"\n"
            if len(_MESSAGES) < 4096:  # a loop's points repeat: encode each once
                _MESSAGES[point] = message
        try:
            sock.sendall(message)
            line = self.local.reader.readline()
        except BaseException as exc:
            # Interrupted mid-exchange (an agent's own timeout raising from a signal handler while
            # held at a point, say): the answer still owed to this request would be read as the
            # answer to the next one, so this connection is dropped and the next call reconnects.
            self._drop()
            if isinstance(exc, OSError) and exc.errno is not None:  # the socket, not the agent's own error
                raise ControlChannelError(f"killdrill: control channel broke at {point}: {exc}") from exc
            raise
        if not line:
            self._drop()
            raise ControlChannelError(f"killdrill: the supervisor closed the control channel at {point}")
        if line == _GO:  # the answer nearly every time: no JSON parse on the hot path
            if not self.persistent:
                self._drop()
            return
        reply = json.loads(line)
        if "error" in reply:
            self._drop()
            raise ControlChannelError(f"killdrill: supervisor rejected {point}: {reply['error']}")
        if not self.persistent:
            self._drop()

    def _drop(self) -> None:
        for name in ("reader", "sock"):
            obj = getattr(self.local, name, None)
            setattr(self.local, name, None)
            if obj is not None:
                try:
                    obj.close()
                except OSError:
                    pass


# None: environment not read yet; False: unarmed (the fast path); _Client: armed.
_client: ControlClient | Literal[False] | None = None
_init_lock = threading.Lock()


def _init() -> ControlClient | Literal[False]:
    global _client
    with _init_lock:
        if _client is None:
            address = os.environ.get(envvars.CONTROL)
            token = os.environ.get(envvars.CONTROL_TOKEN, "")
            wait_at = _points(os.environ.get(envvars.WAIT_AT))
            _client = ControlClient(address, token, wait_at=wait_at) if address else False
            _gate.enabled = bool(address) and os.environ.get(envvars.KILL_GATE) == "1"
        return _client


class _Gate:
    """While a thread of this process waits at a point the drill kills at, the in-process fakes
    make every other thread's call wait for the supervisor's answer.

    The kill lands a moment after the point is reached (the supervisor must be scheduled, read the
    point and signal the tree; on a loaded machine tens of milliseconds): without the gate, a
    parallel branch lands its effect in that moment, and whether a case exercises the resume
    depends on how busy the machine is.  With it, the effects that land are those made before the
    point, whatever the load.  Only in an attempt killed at a point (``KILLDRILL_KILL_GATE``): a
    hold (``POINT~Xs``) must not stall the other threads."""

    def __init__(self) -> None:
        self.enabled = False
        self.waiting = 0
        self.cond = threading.Condition(threading.Lock())
        self.local = threading.local()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self.cond:
            self.waiting += 1
        self.local.inside = True
        try:
            yield
        finally:
            self.local.inside = False
            with self.cond:
                self.waiting -= 1
                if not self.waiting:
                    self.cond.notify_all()

    def wait(self) -> None:
        if not self.waiting or getattr(self.local, "inside", False):
            return
        with self.cond:
            while self.waiting:
                self.cond.wait()


_gate = _Gate()


def await_decisions() -> None:
    """Called by the in-process fakes before a call lands: see :class:`_Gate`.  Near-free when
    no thread waits at a point (one attribute read)."""
    if _gate.enabled:
        _gate.wait()


def _points(text: str | None) -> frozenset[str] | None:
    """``KILLDRILL_WAIT_AT``'s points; None (wait everywhere) when it is absent or not a list of names."""
    if not text:
        return None
    try:
        points = json.loads(text)
    except ValueError:
        return None
    if not isinstance(points, list) or not all(isinstance(p, str) for p in points):
        return None
    return frozenset(points)


def _after_fork_in_child() -> None:
    # The parent's sockets are shared with the child after fork; a child must never read the
    # parent's replies, so it re-reads the environment and opens its own connections.
    global _client, _init_lock, _gate
    _client = None
    _init_lock = threading.Lock()
    _gate = _Gate()  # the parent's waiting threads do not exist here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_replaying: list[Callable[[], bool]] = []


def replays(check: Callable[[], bool], *, on: bool = True) -> None:
    """Register (``on=False``: remove) a runtime's check that the code running now is a replay:
    code re-run to rebuild state, not executed (a durable workflow rebuilt from its history).  A
    point reached in a replay is not emitted, so an integration stacked inside the runtime (an
    agent framework in a durable workflow) counts occurrences of real executions only."""
    if on and check not in _replaying:
        _replaying.append(check)
    elif not on and check in _replaying:
        _replaying.remove(check)


def boundary(point: str) -> None:
    """Announce that the agent reached ``point`` (``before:charge_customer``).

    Blocks while the supervisor decides: continue, hold, or kill the whole process tree.
    A no-op outside a drill, and in a replay (:func:`replays`).
    """
    if _replaying and any(check() for check in _replaying):
        return
    client = _client
    if client is False:
        return
    if client is None:
        client = _init()
        if client is False:
            return
    if _gate.enabled:
        with _gate.held():
            client.send(point)
        return
    client.send(point)


def armed() -> bool:
    """True when this process runs under a killdrill supervisor."""
    client = _client if _client is not None else _init()
    return client is not False


_runtime: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "killdrill_runtime", default=None
)


def runtime_context() -> dict[str, Any] | None:
    """What the durable runtime calls the code running now, as an integration set it with
    :func:`in_runtime` (None outside one).  The fakes record it with every call they answer, so a
    verdict can name the runtime's own attempts (an activity's attempt number)."""
    return _runtime.get()


@contextlib.contextmanager
def in_runtime(**context: Any) -> Iterator[None]:
    """Run the block under ``context`` (JSON values).  Keys the verdict reads: ``runtime``
    (the integration's name), ``unit`` (``activity``), ``name`` (its type), ``attempt`` (the runtime's own
    attempt number, from 1), ``run`` (the id of the run the unit belongs to: its workflow's id); any
    others (``id``) are kept as evidence.  A context variable:
    each asyncio task and each thread started with a copied context sees its own."""
    token = _runtime.set(context)
    try:
        yield
    finally:
        _runtime.reset(token)


CONTEXT_HEADER = "X-Killdrill-Context"
"""The header (HTTP, and the SMTP message's) that carries the caller's runtime context to the
served fakes: added by the bootstrap's patches (``killdrill.integrations._wire``) only on requests
to the fakes' own address, read by the fakes only on a request that passed their guard."""
CONTEXT_META = "killdrill/context"
"""The key of a ``tools/call``'s ``_meta`` that carries the caller's runtime context to the
counting MCP server and proxy over stdio (a pipe only the agent holds)."""
MAX_WIRE_CONTEXT = 4096
"""Longest encoded context on the wire (a workflow id, an activity, a few numbers: ~200 bytes)."""


def wire_context() -> str | None:
    """The runtime context of the code running now as one ASCII JSON line (a header's value),
    or None outside one or when it is longer than :data:`MAX_WIRE_CONTEXT`."""
    context = _runtime.get()
    if not context:
        return None
    text = json.dumps(context, sort_keys=True, separators=(",", ":"), default=str)
    return text if len(text) <= MAX_WIRE_CONTEXT else None


def wire_context_of(text: str | bytes | None) -> dict[str, Any] | None:
    """The context a wire call carried (:func:`wire_context`'s form), None when it carried none;
    ValueError when it is not a JSON object of at most :data:`MAX_WIRE_CONTEXT` bytes."""
    if text is None or not text.strip():
        return None
    if len(text) > MAX_WIRE_CONTEXT:
        raise ValueError(f"{CONTEXT_HEADER} is longer than {MAX_WIRE_CONTEXT} bytes")
    try:
        context = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"{CONTEXT_HEADER} is not JSON") from None
    if not isinstance(context, dict):
        raise ValueError(f"{CONTEXT_HEADER} is not a JSON object")
    return context or None


class node:
    """Mark a step: emits ``before:NAME`` on entry and ``after:NAME`` on normal exit.

    Use as ``@killdrill.node("charge_customer")`` on a function (sync or async) or as
    ``with killdrill.node("charge_customer"):``.  ``after:`` is not emitted when the body
    raises: the step did not complete.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.before = f"before:{name}"
        self.after = f"after:{name}"

    def __enter__(self) -> node:
        boundary(self.before)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            boundary(self.after)

    def __call__(self, fn: F) -> F:
        before, after = self.before, self.after
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                boundary(before)
                result = await fn(*args, **kwargs)
                boundary(after)
                return result

            return async_wrapper  # type: ignore[return-value]  # wraps() keeps fn's signature

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            boundary(before)
            result = fn(*args, **kwargs)
            boundary(after)
            return result

        return wrapper  # type: ignore[return-value]  # wraps() keeps fn's signature
