"""The fakes over HTTP on 127.0.0.1, recording to the same ledger as the in-process fakes.

Routes:
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
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

from killdrill.agent import ControlChannelError, ControlClient
from killdrill.fakes import (
    Answer,
    FakeProviderError,
    Fakes,
    Perform,
    process,
    wire,
)
from killdrill.fakes import model as _model
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
# POST routes other modules serve on this server (path -> route(handler, raw body)).
_POST_ROUTES = {**_model.ROUTES}


class _Answered(Exception):
    """Carries a provider's answer out of the provider method to the HTTP handler."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.status)
        self.answer = answer


class _ServerFakes(Fakes):
    """The fakes as the server runs them: claim, hold, execute; the handler renders the answer."""

    def __init__(self, ledger: Ledger, attempt: int, pid: int) -> None:
        super().__init__(ledger, attempt)
        self.pid = pid

    def _run(self, provider: str, op: str, key: str | None, payload: dict[str, Any], perform: Perform) -> Any:
        answer = process(
            self.ledger, provider, op, key, payload, perform, attempt=self.attempt, pid=self.pid, split=True
        )
        raise _Answered(answer)


@dataclass(frozen=True)
class _Binding:
    """Where requests are recorded now: the supervisor rebinds before each attempt."""

    url: str
    thread: str
    attempt: int
    control: ControlClient | None


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
                node = node.setdefault(part, {})
    return _lists(out)


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        value = {k: _lists(v) for k, v in value.items()}
        if value and all(k.isdigit() for k in value):
            return [value[k] for k in sorted(value, key=int)]
    return value


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a drill's output is the verdict, not an access log."""

    # -- plumbing -----------------------------------------------------------------------------
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Request-Id", f"req_{uuid.uuid4().hex[:14]}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(
        self, status: int, message: str, code: str | None = None, type_: str = "invalid_request_error"
    ) -> None:
        body = {"error": {"type": type_, "message": message, "code": code, "param": None}}
        self._send(status, body, {"Stripe-Should-Retry": "false"})

    def _drop(self) -> None:
        """Close the connection without a response: the caller sees the server vanish."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _fakes(self) -> tuple[_ServerFakes, _Binding]:
        binding = self.server.binding
        attempt = binding.attempt
        if self.headers.get("X-Killdrill-Attempt", "").isdigit():
            attempt = int(self.headers["X-Killdrill-Attempt"])
        pid = int(self.headers["X-Killdrill-Pid"]) if self.headers.get("X-Killdrill-Pid", "").isdigit() else 0
        return _ServerFakes(Ledger(binding.url, binding.thread), attempt, pid), binding

    def _answer(
        self, binding: _Binding, provider: str, op: str, answer: Answer, body: dict[str, Any]
    ) -> None:
        """Announce ``during:`` (the effect is committed), then answer, fail or drop as configured."""
        if binding.control is not None:
            try:
                binding.control.send(f"during:{provider}.{op}")
            except ControlChannelError:
                self._drop()  # the supervisor killed the caller: nobody is left to answer
                return
        if answer.fault == "drop":
            self._drop()
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
        self._send(status, body, headers)

    # -- routes -------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if wire.dispatch(self, method):  # hooks and provider profiles (killdrill.fakes.wire)
                return
            if method == "POST" and path in _POST_ROUTES:  # the model fake (killdrill.fakes.model)
                _POST_ROUTES[path](self, self._body())
            elif method == "POST" and path.startswith("/fakes/"):
                self._generic(path, self._body())
            else:
                self._error(404, f"Unrecognized request URL ({method}: {self.path}).")
        except LedgerError as exc:
            self._error(500, str(exc), type_="api_error")
        except Exception as exc:  # a fake's own bug: one line to the caller, never a dead server thread
            self._error(500, f"killdrill fakes: {type(exc).__name__}: {exc}", type_="api_error")

    def _generic(self, path: str, raw: bytes) -> None:
        parts = path.strip("/").split("/")
        if len(parts) != 3:
            self._error(404, f"expected /fakes/PROVIDER/OP, got {path}")
            return
        _, provider, op = parts
        if provider not in _OPS or (op not in _OPS[provider] and op != "configure"):
            self._error(404, f"no such fake operation: {provider}.{op}")
            return
        try:
            kwargs = json.loads(raw or b"{}")
        except ValueError:
            self._error(400, "the body must be a JSON object")
            return
        if not isinstance(kwargs, dict):
            self._error(400, "the body must be a JSON object")
            return
        key = self.headers.get("Idempotency-Key")
        if key and (provider, op) in _KEYED_OPS:
            kwargs.setdefault("idempotency_key", key)
        fakes, binding = self._fakes()
        method = getattr(fakes.provider(provider), op)
        try:
            result = method(**kwargs)
        except _Answered as done:
            answer = done.answer
            body = answer.body if answer.error is not None else {**answer.body, "replayed": answer.replayed}
            self._answer(binding, provider, op, answer, body)
            return
        except (TypeError, FakeProviderError) as exc:
            self._error(400, f"{provider}.{op}: {exc}")
            return
        self._send(200, {"result": result})  # a read or configure: not recorded, not announced


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    binding: _Binding
    model: _model.ModelFake | None = None
    wire: Mapping[str, Any]  # configuration of the wire fakes, e.g. {"hooks": {...}}


class FakesServer:
    """The HTTP fakes on 127.0.0.1 (a free port), recording to ``ledger`` (a path or URL)."""

    def __init__(
        self,
        ledger: str | os.PathLike[str],
        *,
        thread: str = "default",
        attempt: int = 1,
        port: int = 0,
        model: _model.ModelFake | None = None,
        wire: Mapping[str, Any] | None = None,
    ):
        self.ledger_url = os.fspath(ledger)
        self.wire = dict(wire or {})
        self.port = port
        self.model = model
        self._initial = _Binding(self.ledger_url, thread, attempt, None)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url: str | None = None

    def start(self) -> str:
        """Listen and serve in a background thread; returns the base URL (``http://127.0.0.1:PORT``)."""
        if self._server is not None:
            assert self.url is not None
            return self.url
        Ledger(self.ledger_url, self._initial.thread)  # fail now, in one line, if the ledger is unusable
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.binding = self._initial
        server.model = self.model
        server.wire = self.wire
        self._server = server
        # A short poll interval: stop() (once per attempt in a drill) returns in ~20 ms, not 500.
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.02,), name="killdrill-fakes-http", daemon=True
        )
        self._thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
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

    def stop(self) -> None:
        """Stop serving and close the listening socket (requests in progress are abandoned)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
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
