"""The counting MCP server and proxy, for real: the ``mcp`` SDK's own client over stdio and
streamable HTTP, hostile clients on both transports, and drills that kill an agent during a
``tools/call`` (the answer lost) and between calls, judged from the ledger."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import psutil
import pytest

from tests.frameworks import need

need("mcp", "mcp")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from killdrill.drill import Drill, DrillOptions  # noqa: E402
from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402

PY = sys.executable
REPO = Path(__file__).parents[2]
AGENT = [PY, "-m", "tests.agents.mcp.charge_and_ticket", "--workdir", "{workdir}"]
BOOKING = [PY, "-m", "killdrill.examples.booking_mcp_agent", "--workdir", "{workdir}"]


def _stdio(ledger: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=PY, args=["-m", "killdrill.fakes.mcp", "--ledger", str(ledger), *extra], cwd=str(REPO)
    )


async def _round_trip(server: Any) -> dict[str, Any]:
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        empty = await client.call_tool("payments_charge", {})
        typed = await client.call_tool("payments_charge", {"amount": "700", "currency": "usd"})
        charge = {"idempotency_key": "k1", "amount": 700, "currency": "usd"}
        first = await client.call_tool("payments_charge", charge)
        again = await client.call_tool("payments_charge", charge)
        refused = await client.call_tool("mailbox_send", {"to": "ana@example.com"})
        found = await client.call_tool("payments_lookup", {"key": "k1"})
        missing = await client.call_tool("mailbox_lookup", {"ref": "r9"})
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("payments_steal", {})
    return {
        "tools": tools,
        "empty": empty,
        "typed": typed,
        "first": first,
        "again": again,
        "refused": refused,
        "found": found.structured_content,
        "missing": missing.structured_content,
        "unknown": unknown.value,
    }


def _check_round_trip(got: dict[str, Any], ledger: Ledger) -> None:
    charge = got["tools"]["payments_charge"]
    assert charge.annotations.idempotent_hint is True and charge.annotations.destructive_hint is False
    assert got["tools"]["mailbox_send"].annotations.destructive_hint is True
    assert got["tools"]["mailbox_lookup"].annotations.read_only_hint is True
    schema = charge.input_schema  # the declared arguments, as the SDK's client received them
    assert schema["required"] == ["amount", "currency"] and schema["properties"]["amount"]["minimum"] == 1
    assert got["empty"].is_error and "'amount' is a required property" in got["empty"].content[0].text
    assert got["typed"].is_error and "'amount' must be of type integer" in got["typed"].content[0].text
    assert got["first"].structured_content["id"] == got["again"].structured_content["id"] == "ch_0001"
    assert got["again"].structured_content["replayed"] is True and not got["again"].is_error
    assert got["refused"].is_error and "subject" in got["refused"].content[0].text
    assert got["found"]["result"]["id"] == "ch_0001" and got["missing"] == {"result": None}  # reads
    assert got["unknown"].code == -32602 and "no such tool: 'payments_steal'" in got["unknown"].message
    calls = ledger.calls()
    assert [(c.provider, c.op, c.key, c.outcome) for c in calls] == [
        ("payments", "charge", "k1", "created"),
        ("payments", "charge", "k1", "replayed"),
    ]
    assert calls[0].payload == {"amount": 700, "currency": "usd"}  # the refused calls: none recorded


def test_stdio_server_with_the_real_client(tmp_path: Path) -> None:
    got = anyio.run(_round_trip, _stdio(tmp_path / "l.sqlite"))
    _check_round_trip(got, Ledger(tmp_path / "l.sqlite", "default"))


def test_streamable_http_route_with_the_real_client(tmp_path: Path) -> None:
    with FakesServer(tmp_path / "l.sqlite") as srv:
        assert srv.url is not None
        got = anyio.run(_round_trip, srv.url + "/mcp")
    ledger = Ledger(tmp_path / "l.sqlite", "default")
    _check_round_trip(got, ledger)
    assert {c.pid for c in ledger.calls()} == {os.getpid()}  # the caller, as the kernel says


# -- hostile clients ------------------------------------------------------------------------

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "h", "version": "0"},
    },
}
DEEP = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001
HUGE = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "tickets_create", "arguments": {"title": "x" * 5_000_000}},
}
NOPE = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}
GOOD = {
    "jsonrpc": "2.0",
    "id": 5,
    "method": "tools/call",
    "params": {"name": "tickets_create", "arguments": {"title": "ok"}},
}


def test_stdio_server_answers_a_hostile_client_with_json_rpc_errors(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [PY, "-m", "killdrill.fakes.mcp", "--ledger", str(tmp_path / "l.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def ask(data: bytes | dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((data if isinstance(data, bytes) else json.dumps(data).encode()) + b"\n")
        proc.stdin.flush()
        answer: dict[str, Any] = json.loads(proc.stdout.readline())
        return answer

    try:
        assert "result" in ask(INIT)
        assert ask(b"{garbage")["error"]["code"] == -32700
        assert ask(DEEP)["error"]["code"] == -32700
        huge = ask(HUGE)
        assert huge["error"]["code"] == -32600 and "larger than" in huge["error"]["message"]
        nope = ask(NOPE)
        assert nope["id"] == 4 and nope["error"]["code"] == -32602
        good = ask(GOOD)
        assert good["id"] == 5 and good["result"]["structuredContent"]["id"] == "tkt_0001"
        rss = psutil.Process(proc.pid).memory_info().rss
        assert rss < 200 * 2**20, f"the server holds {rss / 2**20:.0f} MiB after the hostile lines"
    finally:
        proc.stdin.close()
        assert proc.wait(20) == 0
    calls = Ledger(tmp_path / "l.sqlite", "default").calls()
    assert [(c.provider, c.payload) for c in calls] == [("tickets", {"title": "ok"})]


def _post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.netloc, timeout=30)
    try:
        conn.request(
            "POST",
            parts.path,
            body=body,
            headers={"Accept": "application/json, text/event-stream", "Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def _declare_huge(url: str) -> bytes:
    """Announce a 5 MB body and send none of it: the answer's status line."""
    parts = urlsplit(url)
    host, port = parts.netloc.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(json.dumps(HUGE))}\r\n\r\n".encode()
        )
        return sock.recv(200)


def test_http_route_answers_a_hostile_client_and_the_fakes_keep_serving(tmp_path: Path) -> None:
    with FakesServer(tmp_path / "l.sqlite") as srv:
        assert srv.url is not None
        url = srv.url + "/mcp"
        threads = threading.active_count()
        status, body = _post(url, b"{garbage")
        assert status == 400 and body["error"]["code"] == -32700
        status, body = _post(url, DEEP)
        assert status == 400 and body["error"]["code"] == -32700
        assert _declare_huge(url).startswith(b"HTTP/1.1 413")  # the fakes' body bound: nothing read
        status, body = _post(url, json.dumps(NOPE).encode())
        assert status == 200 and body["id"] == 4 and body["error"]["code"] == -32602
        status, body = _post(url, json.dumps(GOOD).encode())
        assert status == 200 and body["result"]["structuredContent"]["id"] == "tkt_0001"
        status, _ = _post(srv.url + "/fakes/tickets/create", json.dumps({"title": "plain"}).encode())
        assert status == 200
        # each request's handler thread ends after its answer; the guard's watchdog starts with
        # the first connection (+1): nothing more stays
        deadline = time.monotonic() + 5
        while threading.active_count() > threads + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert threading.active_count() <= threads + 1, [t.name for t in threading.enumerate()]
    calls = Ledger(tmp_path / "l.sqlite", "default").calls()
    assert [c.payload["title"] for c in calls] == ["ok", "plain"]


# -- the proxy ------------------------------------------------------------------------------


async def _book_twice(server: Any) -> list[Any]:
    async with Client(server) as client:
        tools = (await client.list_tools()).tools
        args = {"guest": "Ana", "room": "12", "night": "2026-12-24", "request_id": "r1"}
        first = await client.call_tool("book", args)
        again = await client.call_tool("book", args)
        missing = await client.call_tool("cancel", {})  # MCPServer answers an unknown tool with isError
    return [[t.model_dump() for t in tools], first.model_dump(), again.model_dump(), missing.model_dump()]


@pytest.mark.parametrize("dedupe", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_proxy_changes_nothing_and_records_every_answered_call(tmp_path: Path, dedupe: bool) -> None:
    hotel = [PY, "-m", "killdrill.examples.booking_mcp_server", "--db", str(tmp_path / "direct.db")]
    hotel += ["--dedupe"] if dedupe else []
    direct = anyio.run(_book_twice, StdioServerParameters(command=hotel[0], args=hotel[1:], cwd=str(REPO)))
    proxied_hotel = [a.replace("direct.db", "proxied.db") for a in hotel]
    proxied = anyio.run(
        _book_twice,
        _stdio(tmp_path / "l.sqlite", "--proxy", "hotel", "--key", "book=request_id", "--", *proxied_hotel),
    )
    assert proxied == direct  # every answer as the server gave it
    assert direct[3]["is_error"] is True
    calls = Ledger(tmp_path / "l.sqlite", "default").calls()
    outcomes = ["created", "replayed"] if dedupe else ["created", "created"]
    assert [(c.provider, c.op, c.key, c.outcome) for c in calls] == [
        ("hotel", "book", "r1", outcomes[0]),
        ("hotel", "book", "r1", outcomes[1]),
        ("hotel", "cancel", None, "failed"),
    ]
    assert calls[0].payload == {"guest": "Ana", "room": "12", "night": "2026-12-24"}


def test_proxy_mistakes_exit_2_in_one_line(tmp_path: Path) -> None:
    for args, text in (
        (["--proxy", "payments", "--", "true"], "a declared provider has that name"),
        (["--proxy", "hotel"], "needs the server's command after --"),
        (["--proxy", "hotel", "--", str(tmp_path / "missing")], "cannot start"),
        (["--key", "a=b"], "go with --proxy"),
    ):
        out = subprocess.run(
            [PY, "-m", "killdrill.fakes.mcp", "--ledger", str(tmp_path / "l"), *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
        )
        assert out.returncode == 2 and text in out.stderr and len(out.stderr.strip().splitlines()) == 1, out


# -- drills ---------------------------------------------------------------------------------


def _drill(tmp_path: Path, command: list[str], *, http: bool = False) -> Drill:
    options = DrillOptions(root=tmp_path, http_fakes=http, timeout=60, discovery_runs=1, cwd=str(REPO))
    return Drill(command, options)


def test_kill_during_a_stdio_tool_call_and_between_calls(tmp_path: Path) -> None:
    with _drill(tmp_path, [*AGENT, "--transport", "stdio", "--unkeyed"]) as drill:
        labels = drill.discover().labels()
        assert labels == ["during:payments.charge", "after:charge", "during:tickets.create", "after:ticket"]
        lost = drill.run_case("during:payments.charge")  # killed in the server: the answer is lost
        between = drill.run_case("after:charge")
    assert lost.kinds == ("duplicate_effect",), lost.text()
    assert lost.ledger is not None
    charges = [c for c in lost.ledger.calls if c.provider == "payments"]
    assert [(c.attempt, c.outcome, c.key) for c in charges] == [(1, "created", None), (2, "created", None)]
    assert between.ok, between.text()  # killed between calls: the checkpoint holds the charge


@pytest.mark.slow
def test_a_keyed_stdio_tool_call_replays_after_a_kill_at_every_point(tmp_path: Path) -> None:
    with _drill(tmp_path, [*AGENT, "--transport", "stdio"]) as drill:
        cases = [drill.run_case(label) for label in drill.discover().labels()]
    assert all(case.ok for case in cases), [case.text() for case in cases if not case.ok]


def test_kill_during_a_tool_call_over_streamable_http(tmp_path: Path) -> None:
    with _drill(tmp_path, [*AGENT, "--transport", "http", "--unkeyed"], http=True) as drill:
        lost = drill.run_case("during:payments.charge")  # the fakes server hangs up the request
    assert lost.kinds == ("duplicate_effect",), lost.text()


@pytest.mark.slow
def test_a_keyed_tool_call_over_streamable_http_replays(tmp_path: Path) -> None:
    with _drill(tmp_path, [*AGENT, "--transport", "http"], http=True) as drill:
        keyed = drill.run_case("during:tickets.create")
    assert keyed.ok, keyed.text()


def _booking(tmp_path: Path, *, keyed: bool, dedupe: bool) -> Drill:
    proxy = [PY, "-m", "killdrill.fakes.mcp", "--proxy", "hotel"] + (
        ["--key", "book=request_id"] if keyed else []
    )
    server = [PY, "-m", "killdrill.examples.booking_mcp_server", "--db", "{workdir}/hotel.db"]
    command = [
        *BOOKING,
        *(["--keyed"] if keyed else []),
        "--",
        *proxy,
        "--",
        *server,
        *(["--dedupe"] if dedupe else []),
    ]
    return _drill(tmp_path, command)


def test_users_server_behind_the_proxy_duplicate_then_exactly_once_with_a_key(tmp_path: Path) -> None:
    with _booking(tmp_path / "plain", keyed=False, dedupe=False) as drill:
        assert drill.discover().labels() == ["during:hotel.book", "during:hotel.book#2"]
        plain = drill.run_case("during:hotel.book#2")
    assert plain.kinds == ("duplicate_effect",), plain.text()
    with _booking(tmp_path / "keyed", keyed=True, dedupe=True) as drill:
        keyed = drill.run_case("during:hotel.book#2")
    assert keyed.ok, keyed.text()
    assert keyed.ledger is not None
    assert [c.outcome for c in keyed.ledger.calls if c.op == "book"][-2:] == ["created", "replayed"]


@pytest.mark.slow
def test_a_key_the_server_ignores_is_still_a_duplicate(tmp_path: Path) -> None:
    with _booking(tmp_path, keyed=True, dedupe=False) as drill:
        case = drill.run_case("during:hotel.book")
    assert case.kinds == ("duplicate_effect",), case.text()


# -- an OpenAI Agents SDK agent on the counting server ----------------------------------------

EXAMPLES = REPO / "killdrill" / "examples"


def _billing(tmp_path: Path, *bug: str) -> Drill:
    options = DrillOptions(
        root=tmp_path,
        http_fakes=True,
        integrations=("openai_agents",),
        model_script=str(EXAMPLES / "billing_mcp_openai_agents.yaml"),
        timeout=90,
        discovery_runs=1,
        cwd=str(REPO),
    )
    command = [PY, "-m", "killdrill.examples.billing_mcp_openai_agents", "--thread", "{thread}"]
    return Drill([*command, "--db", "{workdir}/session.sqlite", *bug], options)


@pytest.mark.slow  # two drills of an LLM agent: ~4 min on a loaded 2-core machine
def test_agents_sdk_over_mcp_the_ungated_receipt_is_sent_twice_the_gated_once(tmp_path: Path) -> None:
    need("openai-agents", "agents")
    with _billing(tmp_path / "bug", "--bug", "receipt-ungated") as drill:
        assert "during:mailbox.send" in drill.discover().labels()
        bug = drill.run_case("during:mailbox.send")
    assert bug.kinds == ("duplicate_effect",), bug.text()
    assert bug.ledger is not None
    sends = [c for c in bug.ledger.calls if c.provider == "mailbox"]
    assert [c.attempt for c in sends] == [1, 2]
    with _billing(tmp_path / "gated") as drill:
        gated = drill.run_case("during:mailbox.send")
    assert gated.ok, gated.text()


@pytest.mark.slow
def test_agents_sdk_over_mcp_the_keyed_charge_replays(tmp_path: Path) -> None:
    need("openai-agents", "agents")
    with _billing(tmp_path) as drill:
        case = drill.run_case("during:payments.charge")
    assert case.ok, case.text()
