"""The hostile and mistaken inputs of the audit: command lines a user gets wrong or a stranger
writes, and requests to the fakes as a buggy or hostile client sends them.

A command line must end in one error line on stderr (after any progress line), exit 2,
promptly, with no traceback and nothing left in the temporary folder; a request to a fake must
be answered 4xx in the provider's error shape, never a 500 or a crash, and record nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.audit.topologies import AMQP, REPO

AGENT = ("python", "tests/agents/basic/steps.py", "--thread", "{thread}", "--ckpt", "{workdir}/c.json")
SERVE = ("--serve", "a=python -m http.server {port} --bind 127.0.0.1")

COMMAND_LINES: list[tuple[str, tuple[str, ...]]] = [
    ("--replicas a=1000000", (*SERVE, "--replicas", "a=1000000", "--", *AGENT)),
    ("{port:missing}", (*SERVE, "--", *AGENT, "{port:missing}")),
    ("{port:a[5]} with one replica", (*SERVE, "--", *AGENT, "{port:a[5]}")),
    ("{port:a[-1]}", (*SERVE, "--", *AGENT, "{port:a[-1]}")),
    ("{port:a[99999999999999]}", (*SERVE, "--", *AGENT, "{port:a[99999999999999]}")),
    ("a second --serve a=", (*SERVE, "--serve", "a=python -c pass", "--", *AGENT)),
    ("--replicas without --serve", ("--replicas", "a=2", "--", *AGENT)),
    ("--restart-delay without --serve", ("--restart-delay", "1", "--", *AGENT)),
    ("--points ';;;'", ("--points", ";;;", "--", *AGENT)),
    ("service name $(touch", ("--serve", "$(touch x)=python -c pass", "--", *AGENT)),
    ("service name サービス", ("--serve", "サービス=python -c pass", "--", *AGENT)),
    ("--ready off the machine", (*SERVE, "--ready", "a=http://example.com/", "--", *AGENT)),
    ("--broker of another scheme", ("--integration", "celery", "--broker", "nonsense://x", "--", *AGENT)),
    ("--broker without the integration", ("--broker", AMQP, "--", *AGENT)),
    ("--replicas a=0", (*SERVE, "--replicas", "a=0", "--", *AGENT)),
    ("--timeout -1", ("--timeout", "-1", "--", *AGENT)),
    ("unknown kill point", ("--points", "during:nosuch.op", "--", *AGENT)),
]


@dataclass
class Answered:
    what: str
    ok: bool
    said: str
    seconds: float = 0.0


def command_line(what: str, args: tuple[str, ...], base: Path) -> Answered:
    tmp = Path(tempfile.mkdtemp(prefix="audit-hostile-", dir=base))
    env = {**os.environ, "TMPDIR": str(tmp)}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "killdrill", "drill", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    seconds = time.monotonic() - start
    lines = proc.stderr.strip().splitlines()
    errors = [ln for ln in lines if "error" in ln.lower()]  # progress lines before it are no error
    left = [p.name for p in tmp.iterdir()]
    one = len(errors) == 1 and lines[-1] == errors[0] and lines[-1].startswith("killdrill: error: ")
    ok = proc.returncode == 2 and one and "Traceback" not in proc.stderr and not left
    said = lines[-1] if ok else f"exit {proc.returncode}: {proc.stderr[-400:]!r} left {left}"
    if not left:
        tmp.rmdir()
    return Answered(what, ok, said, seconds)


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read(300).decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read(300).decode(errors="replace")


def fake_requests(base: Path) -> list[Answered]:
    """Requests a buggy or hostile client sends the HTTP fakes and the MCP server."""
    from killdrill.fakes.http import FakesServer
    from killdrill.ledger import Ledger

    ledger = base / "hostile-fakes.sqlite"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    deep = "metadata" + "[a]" * 500
    cases = [
        ("stripe: metadata nested 500 deep", "/v1/charges", f"amount=100&currency=usd&{deep}=x", form),
        ("stripe: amount=abc", "/v1/charges", "amount=abc&currency=usd", form),
        ("stripe: amount=-5", "/v1/charges", "amount=-5&currency=usd", form),
        (
            "stripe: a JSON body",
            "/v1/charges",
            '{"amount": 100, "currency": "usd"}',
            {"Content-Type": "application/json"},
        ),
        ("hooks: a 60,000-character key", "/hooks/x", "{}", {"Idempotency-Key": "k" * 60_000}),
        (
            "stripe: a 300-character Idempotency-Key",
            "/v1/charges",
            "amount=1&currency=usd",
            {**form, "Idempotency-Key": "k" * 300},
        ),
    ]
    out = []
    with FakesServer(ledger) as srv:
        assert srv.url is not None
        for what, path, body, headers in cases:
            status, text = _post(srv.url + path, body.encode(), headers)
            out.append(Answered(what, 400 <= status < 500, f"{status} {text[:160]!r}"))
    calls = Ledger(ledger, "default").calls()
    out.append(Answered("nothing recorded of those requests", not calls, f"{len(calls)} calls"))
    out += _mcp(base)
    return out


def _mcp(base: Path) -> list[Answered]:
    """JSON-RPC a client sends the counting MCP server over stdio: tool calls the schema refuses."""
    from killdrill.ledger import Ledger

    ledger = base / "hostile-mcp.sqlite"
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "a", "version": "0"},
        },
    }
    calls = [
        ("mcp: payments_charge {}", {}),
        ("mcp: payments_charge amount 'abc'", {"amount": "abc", "currency": "usd"}),
        ("mcp: payments_charge amount -5", {"amount": -5, "currency": "usd"}),
        (
            "mcp: payments_charge a 300-character key",
            {"amount": 5, "currency": "usd", "idempotency_key": "k" * 300},
        ),
    ]
    lines = [init, {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    lines += [
        {
            "jsonrpc": "2.0",
            "id": i + 1,
            "method": "tools/call",
            "params": {"name": "payments_charge", "arguments": a},
        }
        for i, (_, a) in enumerate(calls)
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "killdrill.fakes.mcp", "--ledger", str(ledger)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    answers: dict[Any, Any] = {}
    for message in lines:  # one at a time: a client that closes stdin at once abandons its calls
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        if "id" in message:
            answer = json.loads(proc.stdout.readline() or "{}")
            answers[answer.get("id")] = answer
    proc.stdin.close()
    proc.wait(timeout=60)
    stderr = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    out = []
    for i, (what, _) in enumerate(calls):
        result = answers.get(i + 1, {}).get("result", {})
        text = (result.get("content") or [{}])[0].get("text", "")
        out.append(Answered(what, result.get("isError") is True, text[:160]))
    recorded = Ledger(ledger, "default").calls() if ledger.exists() else []
    out.append(
        Answered(
            "mcp: nothing recorded", not recorded and "Traceback" not in stderr, f"{len(recorded)} calls"
        )
    )
    return out
