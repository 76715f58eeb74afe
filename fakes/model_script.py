"""The model fake's script: replies chosen by the conversation so far, never by a cursor.

A script is a YAML or JSON file the user writes::

    model: gpt-4o-mini                 # optional: the name answered when a request names none
    rules:                             # tried in order; the first whose conditions all hold answers
      - name: charge                   # shown in errors and recorded with the call
        when:
          last_user: {regex: "order (?P<order>[A-Z]-\\d+) for (?P<amount>\\d+) cents"}
          turn: 0                      # assistant messages so far
        reply:
          content: ["Charging the card.", "Let me charge that."]   # alternatives: variance picks
          tool_calls:
            - name: charge_card
              arguments: {order_id: "${order}", amount_cents: "${amount}",
                          memo: {$vary: "Charge for ${order}"}}
      - name: done
        when: {after_tool: send_receipt, any: {regex: "order (?P<order>[A-Z]-\\d+)"}}
        reply: {content: "Charged, notified and receipted ${order}."}

Conditions (all optional, all must hold): ``last_user``, ``last_tool``, ``last`` (the last
message of any role), ``system`` and ``any`` (some message) are substrings, or
``{regex: ...}`` whose named groups become ``${name}`` in the reply; ``after_tool: NAME``
(the last message is a result of tool NAME); ``turn: N`` (assistant messages so far);
``digest: HEX`` (the conversation's digest, printed when no rule matches).  A rule without
``when`` always matches (a fallback).

Because the reply depends only on the request, a resumed process that asks the same
question gets the same answer.  Its ids do not: like a real model, every answer carries new
tool-call and response ids, a function of the conversation, the attempt, how many times this
attempt asked it and the seed (``--model-variance``'s, else 0), so a reproduction gets the same
ids again.  Variance (``--model-variance SEED``) also changes, per attempt, the wording (one of
the alternatives, or a varied opening) and every ``{$vary: ...}`` value (a list: one item per
attempt; a string: tagged; a number: shifted).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from killdrill.errors import UsageError, install_hint

__all__ = [
    "Conversation",
    "Reply",
    "Script",
    "ScriptError",
    "ToolCall",
    "Turn",
    "load_script",
]

_TEXT_CONDITIONS = ("last_user", "last_tool", "last", "system", "any")
_CONDITIONS = (*_TEXT_CONDITIONS, "after_tool", "turn", "digest")
_OPENINGS = ("", "Sure. ", "Okay: ", "Alright. ", "Right away. ", "Understood. ", "Certainly. ")


class ScriptError(UsageError, ValueError):
    """A script that cannot be used, or a conversation no rule answers: one line for the user."""


@dataclass(frozen=True)
class Turn:
    """One message, as both APIs reduce to: role (system/user/assistant/tool) and text."""

    role: str
    text: str
    tool: str | None = None  # a tool result: the tool's name (when the request says)
    tool_calls: tuple[str, ...] = ()  # an assistant message: the names of the tools it called


@dataclass(frozen=True)
class Conversation:
    """A request reduced to what the script can match on."""

    turns: tuple[Turn, ...]
    tool_schemas: str = ""  # the offered tools, as sent (counted in the prompt's tokens)

    @property
    def digest(self) -> str:
        """Of the system, user and tool messages and the tools the model called: the model's own
        wording and ids are left out, so variance does not change it."""
        parts = [
            [t.role, t.text if t.role != "assistant" else "", t.tool or "", list(t.tool_calls)]
            for t in self.turns
        ]
        return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()[:16]

    def last(self, role: str | None = None) -> Turn | None:
        for t in reversed(self.turns):
            if role is None or t.role == role:
                return t
        return None

    @property
    def assistant_turns(self) -> int:
        return sum(t.role == "assistant" for t in self.turns)

    def prompt_tokens(self) -> int:
        return estimate_tokens(" ".join(t.text for t in self.turns) + self.tool_schemas)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """What the model says: text and tool calls, with the rule that chose them."""

    rule: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    digest: str = ""
    nonce: str = ""  # what makes this answer's ids its own (attempt, asking, seed): response ids too


def estimate_tokens(text: str) -> int:
    """About four characters a token, as OpenAI's rule of thumb: a measure, not a bill."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


@dataclass(frozen=True)
class _Rule:
    name: str
    when: Mapping[str, Any]
    reply: Mapping[str, Any]


@dataclass(frozen=True)
class Script:
    """A loaded script; ``answer`` is a pure function of the conversation, seed and attempt."""

    path: str
    rules: tuple[_Rule, ...]
    model: str = "killdrill-model"
    _regex: dict[str, re.Pattern[str]] = field(default_factory=dict, repr=False, compare=False)

    def answer(
        self, conv: Conversation, *, variance: int | None = None, attempt: int = 1, asked: int = 0
    ) -> Reply:
        """The first matching rule's reply, its content varied per attempt when ``variance`` is a
        seed; its ids new for every ``attempt`` and every time (``asked``) the attempt asks again."""
        for rule in self.rules:
            captures = self._match(rule, conv)
            if captures is not None:
                nonce = json.dumps([conv.digest, variance or 0, attempt, asked])
                return self._render(rule, conv, captures, variance, attempt, nonce)
        last = conv.last()
        said = f"{last.role} {_clip(last.text)!r}" if last else "nothing"
        raise ScriptError(
            f"model script {self.path}: no rule matches this conversation ({len(conv.turns)} messages, "
            f"{conv.assistant_turns} from the assistant; the last is {said}; digest {conv.digest})"
        )

    # ---- matching -------------------------------------------------------------------------
    def _text_match(self, cond: Any, text: str | None, captures: dict[str, str]) -> bool:
        if text is None:
            return False
        if isinstance(cond, str):
            return cond in text
        pattern = self._regex.setdefault(cond["regex"], re.compile(cond["regex"], re.DOTALL))
        m = pattern.search(text)
        if m is None:
            return False
        captures.update({k: v for k, v in m.groupdict().items() if v is not None})
        return True

    def _match(self, rule: _Rule, conv: Conversation) -> dict[str, str] | None:
        captures: dict[str, str] = {}
        w = rule.when
        last = conv.last()
        texts: dict[str, list[str | None]] = {
            "last_user": [_text(conv.last("user"))],
            "last_tool": [_text(conv.last("tool"))],
            "last": [_text(last)],
            "system": [t.text for t in conv.turns if t.role == "system"] or [None],
            "any": [t.text for t in conv.turns] or [None],
        }
        for name in _TEXT_CONDITIONS:
            if name in w and not any(self._text_match(w[name], t, captures) for t in texts[name]):
                return None
        if "after_tool" in w and (last is None or last.role != "tool" or last.tool != w["after_tool"]):
            return None
        if "turn" in w and conv.assistant_turns != int(w["turn"]):
            return None
        if "digest" in w and conv.digest != str(w["digest"]):
            return None
        return captures

    # ---- rendering ------------------------------------------------------------------------
    def _render(
        self,
        rule: _Rule,
        conv: Conversation,
        captures: Mapping[str, str],
        variance: int | None,
        attempt: int,
        nonce: str,
    ) -> Reply:
        k = 0 if variance is None else variance + attempt - 1  # which variant this attempt gets
        content = rule.reply.get("content", "")
        if isinstance(content, list):
            text = _fill(str(content[k % len(content)]), captures) if content else ""
        else:
            text = _fill(str(content), captures)
            if variance is not None and text:
                text = _OPENINGS[k % len(_OPENINGS)] + text
        calls = []
        for i, spec in enumerate(rule.reply.get("tool_calls") or ()):
            args = _vary(_fill_value(spec.get("arguments") or {}, captures), k, variance is not None)
            call_id = hashlib.sha256(f"{nonce}#{i}".encode()).hexdigest()[:24]
            calls.append(ToolCall(call_id, str(spec["name"]), args))
        completion = text + "".join(c.name + json.dumps(c.arguments) for c in calls)
        return Reply(
            rule=rule.name,
            content=text,
            tool_calls=tuple(calls),
            prompt_tokens=conv.prompt_tokens(),
            completion_tokens=estimate_tokens(completion),
            digest=conv.digest,
            nonce=nonce,
        )


def _text(turn: Turn | None) -> str | None:
    return turn.text if turn is not None else None


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fill(text: str, captures: Mapping[str, str]) -> str:
    return string.Template(text).safe_substitute(captures)


_WHOLE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


def _fill_value(value: Any, captures: Mapping[str, str]) -> Any:
    """``${name}`` in every string; a string that is only ``${name}`` of digits becomes a number."""
    if isinstance(value, str):
        m = _WHOLE.match(value)
        if m and m.group(1) in captures and re.fullmatch(r"-?\d+", captures[m.group(1)]):
            return int(captures[m.group(1)])
        return _fill(value, captures)
    if isinstance(value, Mapping):
        return {k: _fill_value(v, captures) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_value(v, captures) for v in value]
    return value


def _vary(value: Any, k: int, on: bool) -> Any:
    """Resolve ``{$vary: ...}``: the first choice (or the value) without variance, else variant k."""
    if isinstance(value, Mapping):
        if set(value) == {"$vary"}:
            v = value["$vary"]
            if isinstance(v, list):
                return v[k % len(v)] if on else v[0]
            if not on or k == 0:
                return v
            if isinstance(v, bool) or not isinstance(v, str | int | float):
                return v
            return v + k if isinstance(v, int | float) else f"{v} (v{k})"
        return {key: _vary(v, k, on) for key, v in value.items()}
    if isinstance(value, list):
        return [_vary(v, k, on) for v in value]
    return value


def _check_vary(value: Any, where: str) -> None:
    if isinstance(value, Mapping):
        if "$vary" in value:
            v = value["$vary"]
            if set(value) != {"$vary"} or (isinstance(v, list) and not v):
                raise ScriptError(f"{where}: $vary must be alone in its mapping, with a non-empty list")
            if isinstance(v, Mapping | bool) or v is None:
                raise ScriptError(f"{where}: $vary takes a list, a string or a number")
            return
        for k, v in value.items():
            _check_vary(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_vary(v, f"{where}[{i}]")


def _parse(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ScriptError(f"model script {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ScriptError(f"model script {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if path.endswith(".json"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ScriptError(f"model script {path}: not JSON: {exc}") from None
    try:
        import yaml
    except ImportError:  # YAML is optional: JSON scripts need nothing
        try:
            return json.loads(text)
        except ValueError:
            raise ScriptError(
                f"model script {path}: YAML needs PyYAML ({install_hint('model')}), or write JSON"
            ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScriptError(f"model script {path}: not YAML: {' '.join(str(exc).split())}") from None


def _rule(i: int, raw: Any, path: str) -> _Rule:
    where = f"model script {path}: rule {i + 1}"
    if not isinstance(raw, Mapping):
        raise ScriptError(f"{where}: expected a mapping with `when` and `reply`")
    name = str(raw.get("name") or f"rule {i + 1}")
    where = f"model script {path}: rule {name!r}"
    unknown = set(raw) - {"name", "when", "reply"}
    if unknown:
        raise ScriptError(f"{where}: unknown field(s) {sorted(unknown)}; expected name, when, reply")
    when = raw.get("when") or {}
    reply = raw.get("reply")
    if not isinstance(when, Mapping):
        raise ScriptError(f"{where}: `when` must be a mapping")
    bad = set(when) - set(_CONDITIONS)
    if bad:
        raise ScriptError(f"{where}: unknown condition(s) {sorted(bad)}; expected {', '.join(_CONDITIONS)}")
    for cond in _TEXT_CONDITIONS:
        v = when.get(cond)
        if v is None:
            continue
        if isinstance(v, Mapping):
            if set(v) != {"regex"}:
                raise ScriptError(f"{where}: {cond} takes a string or {{regex: ...}}")
            try:
                re.compile(v["regex"])
            except re.error as exc:
                raise ScriptError(f"{where}: {cond} regex {v['regex']!r}: {exc}") from None
        elif not isinstance(v, str):
            raise ScriptError(f"{where}: {cond} takes a string or {{regex: ...}}")
    if "turn" in when and (isinstance(when["turn"], bool) or not isinstance(when["turn"], int)):
        raise ScriptError(f"{where}: turn takes a number (assistant messages so far)")
    if isinstance(reply, str):
        reply = {"content": reply}
    if not isinstance(reply, Mapping):
        raise ScriptError(f"{where}: `reply` must be a mapping with content and/or tool_calls")
    extra = set(reply) - {"content", "tool_calls"}
    if extra:
        raise ScriptError(f"{where}: unknown reply field(s) {sorted(extra)}; expected content, tool_calls")
    content = reply.get("content", "")
    if not isinstance(content, str | list) or (isinstance(content, list) and not content):
        raise ScriptError(f"{where}: content takes a string or a non-empty list of alternatives")
    calls = reply.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ScriptError(f"{where}: tool_calls must be a list")
    for j, call in enumerate(calls):
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise ScriptError(f"{where}: tool call {j + 1} needs a name")
        if not isinstance(call.get("arguments", {}), Mapping):
            raise ScriptError(f"{where}: tool call {call['name']!r}: arguments must be a mapping")
        _check_vary(call.get("arguments", {}), f"{where}: tool call {call['name']!r} arguments")
    return _Rule(name, dict(when), dict(reply))


def load_script(path: str | os.PathLike[str]) -> Script:
    """Read and check a script; every mistake is one :class:`ScriptError` line naming the rule."""
    path = os.fspath(path)
    data = _parse(path)
    if isinstance(data, list):
        data = {"rules": data}
    if not isinstance(data, Mapping) or not isinstance(data.get("rules"), list) or not data["rules"]:
        raise ScriptError(f"model script {path}: expected a non-empty `rules` list")
    unknown = set(data) - {"rules", "model"}
    if unknown:
        raise ScriptError(f"model script {path}: unknown top-level field(s) {sorted(unknown)}")
    rules = tuple(_rule(i, r, path) for i, r in enumerate(data["rules"]))
    return Script(path=path, rules=rules, model=str(data.get("model") or "killdrill-model"))


def tool_schemas_text(tools: Sequence[Any] | None) -> str:
    return json.dumps(tools, sort_keys=True) if tools else ""
