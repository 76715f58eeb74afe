"""pydantic-ai's tool-call activity on Temporal: its points are named after the tool it calls; a
client written for the local default server is sent to the case's server."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from killdrill.integrations.temporal import ADDRESS_ENV, NAMESPACE_ENV, _tool_name, _wrap_connect


@dataclass
class CallToolParams:  # the shape of pydantic-ai's activity argument
    name: str
    tool_args: dict[str, Any]


CallToolParams.__module__ = "pydantic_ai.durable_exec.temporal._toolset"


@dataclass
class Other:
    name: str
    tool_args: dict[str, Any]


def _input(*args: object) -> SimpleNamespace:
    return SimpleNamespace(args=args)


def test_a_pydantic_ai_tool_call_is_named_after_the_tool() -> None:
    params = CallToolParams("charge_card", {"amount": 1})
    assert _tool_name("agent__billing__toolset__<agent>__call_tool", _input(params, None)) == "charge_card"


def test_other_activities_keep_their_type() -> None:
    params = CallToolParams("charge_card", {})
    assert _tool_name("agent__billing__model_request", _input(params)) is None  # not a tool call
    assert _tool_name("call_tool", _input(Other("charge_card", {}))) is None  # not pydantic-ai's
    assert _tool_name("call_tool", _input()) is None


class _Client:
    """Records where ``connect`` was sent (the shape of ``temporalio.client.Client.connect``)."""

    @classmethod
    async def connect(cls, target_host: str, *, namespace: str = "default", **kwargs: Any) -> Any:
        return cls, target_host, namespace


def _connect(monkeypatch: pytest.MonkeyPatch, *args: Any, **kwargs: Any) -> Any:
    monkeypatch.setenv(ADDRESS_ENV, "127.0.0.1:40001")
    monkeypatch.setenv(NAMESPACE_ENV, "kd-case-ns")

    class Client(_Client):
        connect = _wrap_connect(_Client.connect)

    return Client, asyncio.run(Client.connect(*args, **kwargs))


def test_a_client_of_the_local_default_server_is_sent_to_the_case_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the SDK samples' Client.connect("localhost:7233"): no edit needed to drill them
    client, (cls, *where) = _connect(monkeypatch, "localhost:7233")
    assert where == ["127.0.0.1:40001", "kd-case-ns"]
    assert cls is client, "the classmethod stays bound to the caller's class"
    assert "sent to the case's server 127.0.0.1:40001, namespace kd-case-ns" in capsys.readouterr().err
    assert _connect(monkeypatch, "127.0.0.1:7233", namespace="default")[1][1:] == (
        "127.0.0.1:40001",
        "kd-case-ns",
    )


def test_any_address_and_namespace_is_sent_to_the_case_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server the user runs or a cloud: cases on a server the drill does not run share its task
    queues (one case's worker runs another's activities: a duplicate lands in the wrong ledger)."""
    case = ("127.0.0.1:40001", "kd-case-ns")
    assert tuple(_connect(monkeypatch, "temporal.prod:7233")[1][1:]) == case
    assert tuple(_connect(monkeypatch, "localhost:7244", namespace="billing")[1][1:]) == case
    capsys.readouterr()
    cloud = _connect(monkeypatch, "acme.tmprl.cloud:7233", namespace="acme", tls=True, api_key="k")
    assert tuple(cloud[1][1:]) == case  # the dev server is plain gRPC: no TLS, no key
    err = capsys.readouterr().err
    assert "Client.connect('acme.tmprl.cloud:7233', namespace 'acme')" in err
    assert "(without its tls, api_key)" in err


def test_without_a_case_server_the_address_is_the_agents_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ADDRESS_ENV, raising=False)
    cls = type("Client", (_Client,), {"connect": _wrap_connect(_Client.connect)})
    assert asyncio.run(cls.connect("localhost:7233"))[1:] == ("localhost:7233", "default")


def test_activation_wraps_the_sdks_client_connect() -> None:
    pytest.importorskip("temporalio")
    import temporalio.client

    from killdrill.integrations import temporal

    temporal.activate()
    try:
        assert getattr(temporalio.client.Client.connect, "__wrapped__", None) is not None
    finally:
        temporal.deactivate()
    assert getattr(temporalio.client.Client.connect, "__wrapped__", None) is None


def test_the_dev_servers_binary_is_the_option_then_the_documented_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from killdrill.integrations.temporal import INTEGRATION
    from killdrill.integrations.temporal.server import BINARY_ENV, find_binary
    from killdrill.options import DrillOptions

    monkeypatch.setenv(BINARY_ENV, "/from/env/temporal")
    given = DrillOptions(integrations=("temporal",), integration_options={"temporal_binary": "/opt/temporal"})
    assert find_binary(INTEGRATION.option(given, "temporal_binary")) == "/opt/temporal"
    assert find_binary(INTEGRATION.option(None, "temporal_binary")) == "/from/env/temporal"
