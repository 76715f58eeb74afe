"""The fakes over HTTP on 127.0.0.1, recording to the same ledger as the in-process fakes.

Routes, under the base URL ``http://127.0.0.1:PORT/SECRET`` (see :mod:`killdrill.fakes.httpguard`
for the checks every request passes first; register new routes there with ``route``):
``POST /fakes/{provider}/{op}``  JSON object of keyword arguments (``Idempotency-Key`` header or an
                                 ``idempotency_key`` field); reads (``lookup``, ``get``) and
                                 ``configure`` work the same way.  Answers JSON.
Any method, any path a wire family registered (``killdrill.fakes.wire``): ``/hooks/...``, the
Stripe subset (``/v1/payment_intents``, ``/v1/refunds``), Razorpay, GoCardless, Checkout.com.
``POST /v1/chat/completions``    the model fake (OpenAI and Anthropic APIs), answered from a
``POST /v1/messages``            script and recorded as calls, never effects: ``fakes/model.py``.

Unlike the in-process fakes, a keyed request here is two transactions: the key is claimed (in
flight: a concurrent request with it gets a 409), the optional ``latency`` passes, then the effect
and its record are committed.  After that commit the handler announces ``during:PROVIDER.OP`` on
the attempt's control channel and blocks until the supervisor answers; when the supervisor kills
the caller instead, it closes the channel and the handler drops the connection unanswered.

Connection faults armed for one attempt (``FakesServer.arm``, from the schedule items
``drop:PROVIDER.OP[#N][~Xs]`` and ``reset:PROVIDER.OP[#N]``) count that attempt's requests of the
op, wire routes included: on the N-th, ``drop`` lets the provider commit, holds the response the
given time, then closes the connection unanswered; ``reset`` resets the connection (RST) before
the request is processed, so nothing is committed.  Either way the caller's own retry logic runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NoReturn
from urllib.parse import parse_qsl

from killdrill.agent import ControlChannelError, ControlClient
from killdrill.fakes import (
    STRIPE_RULES,
    Answer,
    FakeProviderError,
    Fakes,
    KeyRules,
    Perform,
    process,
    wire,
)
from killdrill.fakes import model as _model
from killdrill.fakes.httpguard import GuardedHandler, GuardedServer, Request, Route, route
from killdrill.ledger import Ledger, LedgerError

__all__ = ["FakesServer", "decode_form", "main"]

_KEYED_OPS = {
    ("payments", "charge"),
    ("payments", "refund"),
    ("tickets", "create"),
    ("webhooks", "post"),
    ("counter", "increment"),
}
_OPS = {
    "payments": ("charge", "refund", "lookup", "get"),
    "tickets": ("create",),
    "webhooks": ("post",),
    "counter": ("increment", "get"),
    "kv": ("set", "get"),
    "mailbox": ("send", "lookup"),
    "inventory": ("reserve", "release", "get"),
}
_INT_FIELDS = {"amount", "application_fee_amount"}


class _Answered(Exception):
    """Carries a provider's answer out of the provider method to the HTTP handler."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.status)
        self.answer = answer


class _Reset(Exception):
    """An armed ``reset:`` fault: the handler resets the connection, nothing was processed."""


class FaultPlan:
    """One attempt's armed connection fault: which request of which op, and whom to tell."""

    def __init__(
        self, fault: str, point: str, occurrence: int, hold_s: float, applied: Callable[[str], None]
    ):
        self.fault, self.occurrence, self.hold_s, self.applied = fault, occurrence, hold_s, applied
        self.op = point.split(":", 1)[1]
        self._seen = 0
        self._lock = threading.Lock()

    def take(self, provider: str, op: str) -> str | None:
        """The fault to apply to this request (counted per op, in arrival order), or None."""
        if f"{provider}.{op}" != self.op:
            return None
        with self._lock:
            self._seen += 1
            hit = self._seen == self.occurrence
        if hit:
            label = self.op if self.occurrence == 1 else f"{self.op}#{self.occurrence}"
            self.applied(
                f"reset the connection of {label} before it was processed"
                if self.fault == "reset"
                else f"dropped the response of {label} after the provider committed it"
                + (f" (held {self.hold_s:g}s)" if self.hold_s else "")
            )
            return self.fault
        return None


class _ServerFakes(Fakes):
    """The fakes as the server runs them: claim, hold, execute; the handler renders the answer."""

    def __init__(self, ledger: Ledger, attempt: int, pid: int, faults: FaultPlan | None = None) -> None:
        super().__init__(ledger, attempt)
        self.pid = pid
        self.faults = faults

    def execute(
        self,
        provider: str,
        op: str,
        key: str | None,
        payload: dict[str, Any],
        perform: Perform,
        rules: KeyRules = STRIPE_RULES,
    ) -> Answer:
        """Process one request over HTTP (claim, latency, execute), under the armed connection fault."""
        fault = self.faults.take(provider, op) if self.faults is not None else None
        if fault == "reset":
            raise _Reset(f"{provider}.{op}")
        answer = process(
            self.ledger,
            provider,
            op,
            key,
            payload,
            perform,
            attempt=self.attempt,
            pid=self.pid,
            split=True,
            rules=rules,
        )
        if fault == "drop":
            assert self.faults is not None
            time.sleep(self.faults.hold_s)  # the provider committed; the caller waits for nothing
            answer = replace(answer, fault="drop")
        return answer

    def _run(
        self, provider: str, op: str, key: str | None, payload: dict[str, Any], perform: Perform
    ) -> NoReturn:
        raise _Answered(self.execute(provider, op, key, payload, perform))


@dataclass(frozen=True)
class _Binding:
    """Where requests are recorded now: the supervisor rebinds before each attempt."""

    url: str
    thread: str
    attempt: int
    control: ControlClient | None
    faults: FaultPlan | None = None


def decode_form(body: str) -> dict[str, Any]:
    """Stripe's form encoding (``metadata[order]=7``, ``payment_method_types[0]=card``) to JSON values."""
    out: dict[str, Any] = {}
    for name, value in parse_qsl(body, keep_blank_values=True):
        parts = [name.split("[", 1)[0], *re.findall(r"\[([^\]]*)\]", name)]
        node = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part == "":  # "expand[]": append
                part = str(sum(1 for k in node if k.isdigit()))
            if last:
                node[part] = int(value) if part in _INT_FIELDS and value.lstrip("-").isdigit() else value
            else:
                child = node.setdefault(part, {})
                if not isinstance(child, dict):
                    raise ValueError(f"{name!r} nests into the plain value of {part!r}")
                node = child
    return {k: _lists(v) for k, v in out.items()}  # numbered keys below the top level are lists


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        value = {k: _lists(v) for k, v in value.items()}
        if value and all(k.isdigit() for k in value):
            return [value[k] for k in sorted(value, key=int)]
    return value


class _Handler(GuardedHandler):
    """The fakes' routes share this: Stripe-shaped errors and headers, the attempt's binding."""

    server: _Server

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().send_json(status, body, {"Request-Id": f"req_{uuid.uuid4().hex[:14]}", **(headers or {})})

    def dispatch(self, handler: Route, request: Request) -> None:
        try:
            handler(self, request)
        except _Reset:
            self.reset()
        except LedgerError as exc:  # the ledger is unusable: the caller learns it in one line
            self.stripe_error(500, str(exc), type_="api_error")
        except Exception as exc:  # a fake's own bug: one line to the caller, never a dead thread
            self.stripe_error(500, f"killdrill fakes: {type(exc).__name__}: {exc}", type_="api_error")

    def serve_family(self, path: str, query: str, body: bytes) -> bool:
        """Hooks and provider profiles (:mod:`killdrill.fakes.wire`), behind the same guard."""
        try:
            return wire.dispatch(self, self.command, path, query, body)
        except _Reset:
            self.reset()
        except LedgerError as exc:
            self.stripe_error(500, str(exc), type_="api_error")
        except Exception as exc:  # a fake's own bug: one line to the caller, never a dead thread
            self.stripe_error(500, f"killdrill fakes: {type(exc).__name__}: {exc}", type_="api_error")
        return True

    def reset(self) -> None:
        """Reset the connection (RST, no response): the caller sees ``ECONNRESET``."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def stripe_error(
        self, status: int, message: str, code: str | None = None, type_: str = "invalid_request_error"
    ) -> None:
        body = {"error": {"type": type_, "message": message, "code": code, "param": None}}
        self.send_json(status, body, {"Stripe-Should-Retry": "false"})

    def fakes(self) -> tuple[_ServerFakes, _Binding]:
        """The fakes as bound now.  The attempt comes from the binding only, never from the caller."""
        binding = self.server.binding
        pid_text = self.headers.get("X-Killdrill-Pid", "")
        pid = int(pid_text) if pid_text.isdigit() and len(pid_text) < 10 else 0
        return _ServerFakes(
            Ledger(binding.url, binding.thread), binding.attempt, pid, binding.faults
        ), binding

    def idempotency_key(self) -> str | None:
        """The ``Idempotency-Key`` header (Stripe allows 255 characters), or None."""
        key = self.headers.get("Idempotency-Key") or None
        if key is not None and len(key) > 255:
            raise _BadRequest("Idempotency-Key is longer than 255 characters")
        return key

    def answer(self, binding: _Binding, provider: str, op: str, answer: Answer, body: dict[str, Any]) -> None:
        """Announce ``during:`` (the effect is committed), then answer, fail or drop as configured."""
        if binding.control is not None:
            try:
                binding.control.send(f"during:{provider}.{op}")
            except ControlChannelError:
                self.hang_up()  # the supervisor killed the caller: nobody is left to answer
                return
        if answer.fault == "drop":
            self.hang_up()
            return
        headers = {"Idempotent-Replayed": "true" if answer.replayed else "false"}
        key = self.headers.get("Idempotency-Key")
        if key:
            headers["Idempotency-Key"] = key
        headers["X-Killdrill-Outcome"] = answer.call.outcome
        headers["X-Killdrill-Seq"] = str(answer.call.seq)
        status = answer.status
        if answer.fault == "indeterminate":
            status = 500
            body = {
                "error": {
                    "type": "api_error",
                    "message": f"{provider}.{op}: injected error after the request was executed",
                    "code": "indeterminate",
                    "param": None,
                }
            }
        if status >= 400 or answer.fault:
            headers["Stripe-Should-Retry"] = "true" if answer.should_retry else "false"
        self.send_json(status, body, headers)


class _BadRequest(Exception):
    """A request a real provider would answer 400."""


def _route(method: str, pattern: str) -> Callable[[Callable[[_Handler, Request], None]], Route]:
    """Register a fakes route; a ``_BadRequest`` it raises is a 400."""

    def register(fn: Callable[[_Handler, Request], None]) -> Route:
        def run(handler: GuardedHandler, request: Request) -> None:
            assert isinstance(handler, _Handler)
            try:
                fn(handler, request)
            except _BadRequest as exc:
                handler.stripe_error(400, str(exc))

        return route(method, pattern)(run)

    return register


@_route("POST", r"/fakes/([a-z_]+)/([a-z_]+)")
def _generic(h: _Handler, req: Request) -> None:
    provider, op = req.match.groups()
    if provider not in _OPS or (op not in _OPS[provider] and op != "configure"):
        h.stripe_error(404, f"no such fake operation: {provider}.{op}")
        return
    try:
        kwargs = json.loads(req.body or b"{}")
    except (ValueError, RecursionError):
        kwargs = None
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise _BadRequest("the body must be a JSON object")
    key = h.idempotency_key()
    if key and (provider, op) in _KEYED_OPS:
        kwargs.setdefault("idempotency_key", key)
    fakes, binding = h.fakes()
    method = getattr(fakes.provider(provider), op)
    try:
        result = method(**kwargs)
    except _Answered as done:
        answer = done.answer
        body = answer.body if answer.error is not None else {**answer.body, "replayed": answer.replayed}
        h.answer(binding, provider, op, answer, body)
        return
    except (TypeError, ValueError, FakeProviderError) as exc:
        raise _BadRequest(f"{provider}.{op}: {exc}") from None
    h.send_json(200, {"result": result})  # a read or configure: not recorded, not announced


def _model_route(path: str, serve: Callable[[Any, bytes], None]) -> None:
    """The model fake's endpoints (:mod:`killdrill.fakes.model`), behind the same guard."""
    route("POST", re.escape(path))(lambda handler, request: serve(handler, request.body))


for _path, _serve_model in _model.ROUTES.items():
    _model_route(_path, _serve_model)


class _Server(GuardedServer):
    binding: _Binding
    model: _model.ModelFake | None = None
    wire: Mapping[str, Any]  # configuration of the wire fakes, e.g. {"hooks": {...}}


class FakesServer:
    """The HTTP fakes on 127.0.0.1 (a free port), recording to ``ledger`` (a path or URL).

    The base URL carries the drill's ``secret`` as its first path segment: only a caller given
    the URL (the agent, through ``KILLDRILL_FAKES_URL``) can record an effect.
    """

    def __init__(
        self,
        ledger: str | os.PathLike[str],
        *,
        thread: str = "default",
        attempt: int = 1,
        port: int = 0,
        model: _model.ModelFake | None = None,
        wire: Mapping[str, Any] | None = None,
        secret: str | None = None,
    ):
        self.ledger_url = os.fspath(ledger)
        self.wire = dict(wire or {})
        self.port = port
        self.secret = secret or secrets.token_urlsafe(18)
        self.model = model
        self._initial = _Binding(self.ledger_url, thread, attempt, None)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url: str | None = None

    def start(self) -> str:
        """Listen and serve in a background thread; returns the base URL (``http://127.0.0.1:PORT/SECRET``)."""
        if self._server is not None:
            assert self.url is not None
            return self.url
        Ledger(self.ledger_url, self._initial.thread)  # fail now, in one line, if the ledger is unusable
        server = _Server(("127.0.0.1", self.port), _Handler, self.secret)
        server.binding = self._initial
        server.model = self.model
        server.wire = self.wire
        self._server = server
        # A short poll interval: stop() (once per attempt in a drill) returns in ~20 ms, not 500.
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.02,), name="killdrill-fakes-http", daemon=True
        )
        self._thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}/{self.secret}"
        return self.url

    def bind(
        self,
        thread: str,
        attempt: int,
        control_address: str | None = None,
        control_token: str | None = None,
    ) -> None:
        """Record the next requests under ``thread``/``attempt``; announce ``during:`` on that channel."""
        control = ControlClient(control_address, control_token or "") if control_address else None
        binding = _Binding(self.ledger_url, thread, attempt, control)
        self._initial = binding
        if self._server is not None:
            self._server.binding = binding

    def arm(self, run: Any) -> None:
        """Arm the connection fault of the attempt just bound (a supervisor's ``Running`` whose kill
        is a ``drop:``/``reset:`` schedule item); when it lands, the attempt counts as reached."""
        kill = run.spec.kill
        if kill is None or kill.fault is None:
            return

        def applied(note: str) -> None:
            run.fired = True
            run.notes.append(note)

        plan = FaultPlan(kill.fault, kill.point, kill.occurrence, (kill.hold_ms or 0.0) / 1000.0, applied)
        self._initial = replace(self._initial, faults=plan)
        if self._server is not None:
            self._server.binding = self._initial

    def stop(self) -> None:
        """Stop serving, close every connection and wait for every handler thread to end."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.close_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.url = None

    def __enter__(self) -> FakesServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m killdrill.fakes.http --ledger PATH``: serve the fakes by hand until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m killdrill.fakes.http", description=main.__doc__)
    parser.add_argument("--ledger", required=True, help="ledger file path or SQLAlchemy URL")
    parser.add_argument("--thread", default="default")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model-script", help="answer /v1/chat/completions and /v1/messages from FILE")
    parser.add_argument("--model-variance", type=int, metavar="SEED", help="vary the model's replies")
    args = parser.parse_args(argv)
    try:
        model = None
        if args.model_script:
            from killdrill.fakes.model_script import load_script

            model = _model.ModelFake(load_script(args.model_script), args.model_variance)
        server = FakesServer(args.ledger, thread=args.thread, port=args.port, model=model)
        url = server.start()
    except (LedgerError, OSError, ValueError) as exc:
        print(f"killdrill: {exc}", file=sys.stderr)
        return 2
    print(f"KILLDRILL_FAKES_URL={url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
