"""The agent's command and environment: placeholders, ``python``, harness variables, and the
thread/workdir written back as ``{thread}``/``{workdir}`` in what the ledger recorded."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from killdrill.alloc import without_gc
from killdrill.errors import HarnessError
from killdrill.records import Attempt, Call, LedgerSnapshot


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.#+~-]+", "_", text)[:60].strip("_") or "case"


def fill(argv: Sequence[str], thread: str, workdir: str) -> list[str]:
    return [a.replace("{thread}", thread).replace("{workdir}", workdir) for a in argv]


def resolve_command(argv: Sequence[str]) -> list[str]:
    """Check the command exists; ``python``/``python3`` mean the interpreter running killdrill."""
    if not argv:
        raise HarnessError("no command given: put the agent's command after --")
    argv = list(argv)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    elif os.sep not in argv[0] and shutil.which(argv[0]) is None:
        raise HarnessError(f"command not found: {argv[0]}")
    elif os.sep in argv[0] and not os.access(argv[0], os.X_OK):
        raise HarnessError(f"command not found or not executable: {argv[0]}")
    return argv


def bootstrap_dir() -> str:
    """The folder put first on the agent's ``PYTHONPATH``: its ``sitecustomize`` activates integrations."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agent", "_bootstrap")


def model_env(url: str) -> dict[str, str]:
    """Point the OpenAI and Anthropic SDKs (and what is built on them) at the model fake.

    The keys are dummies on purpose: a drill must never reach, or bill, a real model.  The OpenAI
    Agents SDK exports traces to api.openai.com whatever the base URL: turned off.
    """
    return {
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        "OPENAI_BASE_URL": f"{url}/v1",
        "OPENAI_API_KEY": "sk-killdrill-fake",
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-ant-killdrill-fake",
    }


_HARNESS_VAR = re.compile(r"\{(KILLDRILL_[A-Z0-9_]+)\}")


_SERVED_BY = {
    "KILLDRILL_FAKES_URL": ("HTTP fakes", "--http-fakes"),
    "KILLDRILL_FAKES_SECRET": ("HTTP fakes", "--http-fakes"),
    "KILLDRILL_SMTP": ("SMTP fake", "--smtp-fake"),
}
"""Harness variables set only when a served fake runs: the flag that starts it."""


def expand_env(env: Mapping[str, str], user: Mapping[str, str]) -> dict[str, str]:
    """``--env`` values may name the harness's variables: ``STRIPE_API_BASE={KILLDRILL_FAKES_URL}``
    is filled per attempt (the fakes' port changes), so an app reads its usual variable."""
    out = dict(env)
    for name in user:
        value = out.get(name)
        if value is None or "{KILLDRILL_" not in value:
            continue

        def fill(m: re.Match[str], name: str = name) -> str:
            if m.group(1) not in out:
                off = _SERVED_BY.get(m.group(1))
                raise HarnessError(
                    f"--env {name}: {{{m.group(1)}}} is not set for the agent"
                    + (f" (the {off[0]} is off: add {off[1]})" if off else "")
                )
            return out[m.group(1)]

        out[name] = _HARNESS_VAR.sub(fill, value)
    return out


def replace_all(value: Any, subs: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in subs.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {replace_all(k, subs): replace_all(v, subs) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(replace_all(v, subs) for v in value)
    return value


def _same_or_replaced(value: Any, subs: Mapping[str, str]) -> Any:
    """:func:`replace_all`, but ``value`` itself when nothing in it changes (no copy)."""
    if isinstance(value, str):
        for old, new in subs.items():
            if old in value:
                value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        out = {_same_or_replaced(k, subs): _same_or_replaced(v, subs) for k, v in value.items()}
        same = len(out) == len(value) and all(
            a is b and out[a] is v for a, (b, v) in zip(out, value.items(), strict=True)
        )
        return value if same else out
    if isinstance(value, list | tuple):
        items = [_same_or_replaced(v, subs) for v in value]
        return value if all(a is b for a, b in zip(value, items, strict=True)) else type(value)(items)
    return value


@without_gc
def normalize(snap: LedgerSnapshot, subs: Mapping[str, str]) -> LedgerSnapshot:
    """The snapshot with ``subs`` replaced in keys, payloads and state; a call nothing changes in
    is kept as it is (at 10^5 calls the copies were seconds of a case, issue 23)."""
    calls = []
    # a payload's repr holds every string in it verbatim (a JSON value: dicts, lists, strings,
    # numbers) whenever the string has no quote, backslash or unprintable character: one C call
    # then tells the payloads nothing changes in, without walking them (issue 23)
    olds = list(subs)
    verbatim = all(old and old.isprintable() and not set(old) & {"'", '"', "\\"} for old in olds)
    for c in snap.calls:
        key = c.key if c.key is None else _same_or_replaced(c.key, subs)
        if verbatim and type(c.payload) is dict:
            text = repr(c.payload)
            payload = _same_or_replaced(c.payload, subs) if any(o in text for o in olds) else c.payload
        else:
            payload = _same_or_replaced(c.payload, subs)
        context = c.context if c.context is None else _same_or_replaced(c.context, subs)
        if key is not c.key or payload is not c.payload or context is not c.context:
            c = Call(
                c.seq, c.provider, c.op, key, payload, c.outcome, c.effect_id, c.attempt, c.pid, c.time,
                context,
            )  # fmt: skip
        calls.append(c)
    in_flight = tuple(replace(f, key=replace_all(f.key, subs)) for f in snap.in_flight)
    return LedgerSnapshot(calls=tuple(calls), state=replace_all(snap.state, subs), in_flight=in_flight)


def how_ended(a: Attempt) -> str:
    if a.returncode is None:
        return "ended"
    if a.returncode < 0:
        return f"died of signal {-a.returncode}"
    return f"exited {a.returncode}"


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""
