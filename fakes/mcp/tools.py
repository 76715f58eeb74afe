"""The fakes' operations as MCP tools, read from the providers' declarations (no ``mcp`` import).

A tool is ``PROVIDER_OP`` for every declared operation of every fake (``payments_charge``,
``mailbox_lookup``): its input schema is the provider method's signature (the method is the
declaration a caller already uses in process and over HTTP) with the operation's declared
``params`` laid over it (``killdrill.providers.Param``: the required fields of a ``**payload``
operation, types, bounds), and a call whose arguments the schema refuses is an MCP tool error
that never reaches the provider.  Its annotations say what the
declaration says: ``readOnlyHint`` for a read, ``idempotentHint`` for a keyed operation (the
same arguments carry the same key) or a convergent provider, ``destructiveHint`` for an
operation that neither a key can dedupe nor another operation undo (``mailbox_send``).  The
fakes are a closed world: ``openWorldHint`` is false.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from killdrill.canonical import canonical_json
from killdrill.fakes.errors import FakeProviderError
from killdrill.fakes.provider import Provider, fake_classes
from killdrill.providers import Operation, spec

__all__ = [
    "MAX_ARGUMENTS",
    "MAX_KEY_LENGTH",
    "MAX_LINE",
    "ToolCallError",
    "ToolSpec",
    "argument_error",
    "call_tool",
    "tool_specs",
]

MAX_LINE = 4 << 20
"""Largest JSON-RPC line the counting server reads and the proxy parses (4 MiB); longer: refused
by the server, passed on in chunks by the proxy, never held whole."""

MAX_ARGUMENTS = 1 << 20
"""Largest tool arguments (1 MiB of canonical JSON), the HTTP fakes' body limit: refused unread."""

MAX_KEY_LENGTH = 255
"""Longest ``idempotency_key`` argument: Stripe's bound, the HTTP fakes' on ``Idempotency-Key``."""

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    type(None): "null",
}


@dataclass(frozen=True)
class ToolSpec:
    """One tool: which provider operation it is, its schema and annotations (MCP's camelCase)."""

    name: str
    provider: str
    op: str
    description: str
    input_schema: Mapping[str, Any]
    annotations: Mapping[str, Any]


class ToolCallError(Exception):
    """A call refused before it reached a provider (an unknown tool, arguments too large):
    a JSON-RPC error for the client, nothing recorded."""


def _type_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of one parameter's annotation (``Any``: no constraint)."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        names = [_JSON_TYPES.get(typing.get_origin(a) or a) for a in typing.get_args(hint)]
        if None in names:
            return {}
        return {"type": names}
    name = _JSON_TYPES.get(origin or hint)
    return {"type": name} if name else {}


def _input_schema(method: Callable[..., Any], operation: Operation) -> dict[str, Any]:
    hints = typing.get_type_hints(method)
    properties: dict[str, Any] = {}
    required: list[str] = []
    extra = False
    for param in list(inspect.signature(method).parameters.values())[1:]:  # self
        if param.kind is param.VAR_KEYWORD:
            extra = True
            continue
        if param.kind is param.VAR_POSITIONAL:
            continue
        if param.name == "idempotency_key" and not operation.keyed:
            continue
        properties[param.name] = _type_schema(hints.get(param.name, Any))
        if param.name == "idempotency_key":
            properties[param.name]["maxLength"] = MAX_KEY_LENGTH
        if param.default is param.empty:
            required.append(param.name)
    for declared in operation.params:
        if declared.name not in properties and not extra:
            raise ValueError(f"{operation.name}: declared param {declared.name!r} is not an argument")
        signature = properties.get(declared.name, {})
        merged = {**signature, **declared.schema()}
        if "null" in signature.get("type", ()) and not declared.required:
            merged["type"] = [declared.type, "null"]  # the signature's default None stays allowed
        properties[declared.name] = merged
        if declared.required and declared.name not in required:
            required.append(declared.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = extra
    return schema


def _annotations(provider: str, operation: Operation) -> dict[str, Any]:
    declared = spec(provider)
    if operation.read:
        return {"readOnlyHint": True, "openWorldHint": False}
    undone = any(o.undoes == operation.name for o in declared.operations)
    idempotent = operation.keyed or declared.convergent
    return {
        "readOnlyHint": False,
        "idempotentHint": idempotent,
        "destructiveHint": not idempotent and not undone,
        "openWorldHint": False,
    }


def _description(cls: type[Provider], operation: Operation) -> str:
    doc = inspect.getdoc(getattr(cls, operation.name)) or inspect.getdoc(cls) or ""
    first = doc.strip().split("\n\n", 1)[0].replace("\n", " ")
    kind = "lookup, not recorded" if operation.read else "recorded in the drill's ledger"
    return f"{cls.name}.{operation.name} ({kind}). {first}".strip()


def tool_specs() -> dict[str, ToolSpec]:
    """Every declared operation of every fake, by tool name; a name two operations would share is
    an error (``a_b`` + ``c`` against ``a`` + ``b_c``)."""
    tools: dict[str, ToolSpec] = {}
    for provider, cls in fake_classes().items():
        for operation in cls.operations:
            name = f"{provider}_{operation.name}"
            if name in tools:
                raise ValueError(f"MCP tool {name!r} would name two fake operations; rename a provider")
            method = getattr(cls, operation.name)
            tools[name] = ToolSpec(
                name,
                provider,
                operation.name,
                _description(cls, operation),
                _input_schema(method, operation),
                _annotations(provider, operation),
            )
    return tools


def check_arguments(
    name: str, arguments: Mapping[str, Any] | None, tools: Mapping[str, ToolSpec]
) -> ToolSpec:
    """The tool ``name`` names, after the checks a hostile client meets (ToolCallError)."""
    tool = tools.get(name)
    if tool is None:
        raise ToolCallError(f"no such tool: {name[:80]!r} (the fakes' tools: {', '.join(sorted(tools))})")
    if arguments is not None and len(canonical_json(dict(arguments))) > MAX_ARGUMENTS:
        raise ToolCallError(f"{name}: the arguments are larger than {MAX_ARGUMENTS} bytes")
    return tool


_validators: dict[str, Any] = {}


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(error: Any) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    return f"argument {path!r}" if path else "arguments"


def _refusal(error: Any) -> str:
    """What a schema refused, in a line that names the argument and the rule, never the value
    (a refused value may be a megabyte)."""
    kind, rule = error.validator, error.validator_value
    if kind in ("required", "additionalProperties"):
        return _short(error.message, 300)
    if kind == "type":
        names = rule if isinstance(rule, list) else [rule]
        return f"{_where(error)} must be of type {' or '.join(map(str, names))}"
    words = {
        "minimum": "must be at least {}",
        "maximum": "must be at most {}",
        "maxLength": "must be at most {} characters long",
        "pattern": "must match {}",
    }
    said = words.get(kind, f"fails {kind} {{}}").format(_short(json.dumps(rule), 120))
    return f"{_where(error)} {said}"


def argument_error(tool: ToolSpec, arguments: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The error body (Stripe's shape) of arguments the tool's input schema refuses, else None:
    checked against the very schema ``tools/list`` advertises (``jsonschema``, the MCP SDK's own
    validator), so what a client is told and what the server holds it to cannot drift."""
    from jsonschema import exceptions
    from jsonschema.validators import validator_for

    validator = _validators.get(tool.name)
    if validator is None or validator.schema != tool.input_schema:
        schema = dict(tool.input_schema)
        validator = _validators[tool.name] = validator_for(schema)(schema)
    error = exceptions.best_match(validator.iter_errors(dict(arguments or {})))
    if error is None:
        return None
    param = ".".join(str(p) for p in error.absolute_path) or None
    if error.validator == "required":
        param = next((p for p in error.validator_value if p not in (arguments or {})), None)
    body: dict[str, Any] = {
        "type": "invalid_request_error",
        "code": "parameter_missing" if error.validator == "required" else "parameter_invalid",
        "message": f"{tool.name}: {_refusal(error)}",
    }
    if param:
        body["param"] = param
    return {"error": body}


def call_tool(
    provider: Provider, tool: ToolSpec, arguments: Mapping[str, Any] | None
) -> tuple[bool, dict[str, Any]]:
    """Call the tool's operation on ``provider``: ``(ok, body)``, a read's answer as ``{"result": ...}``;
    a provider's refusal or a wrong argument is ``(False, error body)`` (an MCP tool error, which
    the model reads and can correct): arguments the tool's schema refuses never reach it."""
    refused = argument_error(tool, arguments)
    if refused is not None:
        return False, refused
    try:
        result = getattr(provider, tool.op)(**dict(arguments or {}))
    except FakeProviderError as exc:
        return False, exc.to_body()
    except TypeError as exc:  # a missing or unknown argument: refused before any request
        return False, {"error": {"type": "invalid_request_error", "message": f"{tool.name}: {exc}"}}
    if tool.annotations.get("readOnlyHint") or not isinstance(result, dict):
        return True, {"result": result}  # a read, as the HTTP fakes answer one: found or None
    return True, result
