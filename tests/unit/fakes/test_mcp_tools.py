"""The fakes as MCP tools: names, schemas and annotations read from the providers' declarations."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from killdrill.fakes import Operation, Param, Provider, connect
from killdrill.fakes.mcp.proxy import check_name, parse_keys
from killdrill.fakes.mcp.tools import (
    MAX_ARGUMENTS,
    ToolCallError,
    _input_schema,
    call_tool,
    check_arguments,
    tool_specs,
)


class Bells(Provider):
    """A test provider: a keyed ring, an unkeyed toll nothing undoes, a silence that undoes a toll."""

    name = "mcp_bells"
    operations = (
        Operation("ring", keyed=True, params=(Param("times", "integer", minimum=1, maximum=12),)),
        Operation("toll"),
        Operation("silence", undoes="toll", target="toll_id"),
        Operation("count", read=True),
    )

    def ring(self, tower: str, times: int = 1, idempotency_key: str | None = None) -> dict[str, Any]:
        """Ring the bells of a tower."""
        return self._invoke("ring", idempotency_key, {"tower": tower, "times": times}, self._create("r", {}))

    def toll(self, tower: str, **payload: Any) -> dict[str, Any]:
        return self._invoke("toll", None, {"tower": tower, **payload}, self._create("t", {}))

    def silence(self, toll_id: str) -> dict[str, Any]:
        return self._invoke("silence", None, {"toll_id": toll_id}, self._create("s", {}))

    def count(self, tower: str) -> int:
        return len(self.calls("ring"))


def test_every_declared_operation_is_a_tool_named_provider_op() -> None:
    tools = tool_specs()
    for name in (
        "payments_charge",
        "mailbox_send",
        "mailbox_lookup",
        "tickets_create",
        "webhooks_post",
        "kv_set",
        "counter_increment",
        "inventory_reserve",
        "mcp_bells_ring",
        "mcp_bells_count",
    ):
        assert name in tools
    assert (tools["mcp_bells_ring"].provider, tools["mcp_bells_ring"].op) == ("mcp_bells", "ring")
    assert "configure_" not in " ".join(tools) and "payments_fence" not in tools


def test_schemas_come_from_the_methods_signatures() -> None:
    ring = tool_specs()["mcp_bells_ring"].input_schema
    assert ring == {
        "type": "object",
        "properties": {
            "tower": {"type": "string"},
            "times": {"type": "integer", "minimum": 1, "maximum": 12},
            "idempotency_key": {"type": ["string", "null"], "maxLength": 255},
        },
        "required": ["tower"],
        "additionalProperties": False,
    }
    assert tool_specs()["mcp_bells_toll"].input_schema["additionalProperties"] is True  # **payload
    send = tool_specs()["mailbox_send"].input_schema
    assert send["required"] == ["to", "subject", "body"] and "idempotency_key" not in send["properties"]
    assert send["properties"]["ref"] == {"type": ["string", "null"], "maxLength": 255}


def test_a_payload_operation_declares_its_required_arguments_and_bounds() -> None:
    charge = tool_specs()["payments_charge"].input_schema
    assert charge["required"] == ["amount", "currency"] and charge["additionalProperties"] is True
    assert charge["properties"]["amount"] == {"type": "integer", "minimum": 1, "maximum": 99_999_999}
    assert charge["properties"]["currency"]["type"] == "string"


def test_a_declared_param_that_is_no_argument_is_refused() -> None:
    def ring(self: Any, times: int) -> dict[str, Any]:
        return {}

    with pytest.raises(ValueError, match="'tiems' is not an argument"):
        _input_schema(ring, Operation("ring", params=(Param("tiems", "integer"),)))


def test_annotations_say_what_the_declaration_says() -> None:
    tools = tool_specs()
    hints = {n: tools[n].annotations for n in tools}
    assert hints["mailbox_lookup"]["readOnlyHint"] is True
    assert hints["mcp_bells_count"]["readOnlyHint"] is True
    assert hints["payments_charge"] == {
        "readOnlyHint": False,
        "idempotentHint": True,
        "destructiveHint": False,
        "openWorldHint": False,
    }
    assert hints["kv_set"]["idempotentHint"] is True  # convergent
    assert (
        hints["mailbox_send"]["destructiveHint"] is True and hints["mailbox_send"]["idempotentHint"] is False
    )
    assert hints["mcp_bells_toll"]["destructiveHint"] is False  # silence undoes it
    assert hints["inventory_reserve"]["destructiveHint"] is False  # release undoes it


def test_a_call_is_recorded_and_a_refusal_is_a_tool_error(tmp_path: Any) -> None:
    fakes = connect(tmp_path / "l.sqlite")
    tools = tool_specs()
    charge = {"idempotency_key": "k", "amount": 5, "currency": "usd"}
    ok, body = call_tool(fakes.payments, tools["payments_charge"], charge)
    assert ok and body["id"] == "ch_0001" and body["replayed"] is False
    ok, body = call_tool(fakes.payments, tools["payments_charge"], {**charge, "amount": 6})
    assert not ok and "same parameters" in body["error"]["message"]
    ok, body = call_tool(fakes.mailbox, tools["mailbox_send"], {"to": "a"})
    assert not ok and "subject" in body["error"]["message"]
    assert [c.outcome for c in fakes.payments.calls()] == ["created", "rejected"]
    assert fakes.mailbox.calls() == []


@pytest.mark.parametrize(
    ("tool", "arguments", "said"),
    [
        ("payments_charge", {}, "payments_charge: 'amount' is a required property"),
        (
            "payments_charge",
            {"amount": "abc", "currency": "usd"},
            "argument 'amount' must be of type integer",
        ),
        ("payments_charge", {"amount": -5, "currency": "usd"}, "argument 'amount' must be at least 1"),
        ("payments_charge", {"amount": True, "currency": "usd"}, "must be of type integer"),
        ("payments_charge", {"amount": 10**12, "currency": "usd"}, "must be at most 99999999"),
        ("payments_charge", {"amount": 5, "currency": "dollars"}, "argument 'currency' must match"),
        (
            "payments_charge",
            {"amount": 5, "currency": "usd", "idempotency_key": "k" * 256},
            "argument 'idempotency_key' must be at most 255 characters long",
        ),
        ("mailbox_send", {"to": "a", "subject": 1, "body": "b"}, "argument 'subject' must be of type string"),
        ("mailbox_send", {"to": "a", "subject": "s", "body": "b", "cc": "x"}, "'cc' was unexpected"),
        ("inventory_reserve", {"sku": "s", "qty": 0}, "argument 'qty' must be at least 1"),
        ("counter_get", {"name": ["x"]}, "argument 'name' must be of type string"),
    ],
)
def test_arguments_the_schema_refuses_are_a_tool_error_and_no_call(
    tmp_path: Any, tool: str, arguments: dict[str, Any], said: str
) -> None:
    fakes = connect(tmp_path / "l.sqlite")
    spec = tool_specs()[tool]
    ok, body = call_tool(fakes.provider(spec.provider), spec, arguments)
    assert not ok and said in body["error"]["message"], body
    assert body["error"]["type"] == "invalid_request_error" and len(body["error"]["message"]) < 400
    assert fakes.provider(spec.provider).calls() == []


def test_unknown_tools_and_huge_arguments_are_refused_before_any_provider() -> None:
    tools = tool_specs()
    with pytest.raises(ToolCallError, match="no such tool: 'nope'"):
        check_arguments("nope", {}, tools)
    with pytest.raises(ToolCallError, match="larger than"):
        check_arguments("tickets_create", {"title": "x" * (MAX_ARGUMENTS + 1)}, tools)


def test_proxy_mistakes_are_one_line() -> None:
    assert parse_keys(["book=request_id"]) == {"book": "request_id"}
    with pytest.raises(ValueError, match="expected TOOL=ARG"):
        parse_keys(["book"])
    with pytest.raises(ValueError, match="a declared provider has that name"):
        check_name("payments")
    with pytest.raises(ValueError, match="identifier"):
        check_name("my-hotel")


def test_importing_killdrill_and_the_fakes_does_not_import_mcp() -> None:
    code = (
        "import sys, killdrill, killdrill.fakes, killdrill.fakes.http, killdrill.fakes.mcp, "
        "killdrill.fakes.mcp.tools, killdrill.fakes.mcp.proxy; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_without_the_mcp_package_the_server_says_so_in_one_line() -> None:
    code = (
        "import sys; sys.modules['mcp'] = None; "
        "from killdrill.fakes.mcp.__main__ import main; sys.exit(main([]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert out.returncode == 2
    assert (
        out.stderr == "killdrill: the counting MCP server needs the mcp package: "
        'pip install -e ".[mcp]" (in killdrill\'s clone)\n'
    )
