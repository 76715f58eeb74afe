"""The agent's command and environment: placeholders, ``python``, harness variables, and the
thread/workdir a run gets (the ledger writes them back as placeholders: killdrill.ledger._substitute)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence

from killdrill import envvars
from killdrill.errors import HarnessError


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.#+~-]+", "_", text)[:60].strip("_") or "case"


def fill(argv: Sequence[str], thread: str, workdir: str) -> list[str]:
    return [a.replace("{thread}", thread).replace("{workdir}", workdir) for a in argv]


def fill_env(env: Mapping[str, str], thread: str, workdir: str) -> dict[str, str]:
    """The ``--env`` values with ``{thread}`` and ``{workdir}`` filled (a deployment's processes
    fill their ports too: killdrill.drill.topology)."""
    return dict(zip(env, fill(list(env.values()), thread, workdir), strict=True))


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
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(package, "integrations", "_bootstrap")


def model_env(url: str) -> dict[str, str]:
    """Point the OpenAI and Anthropic SDKs (and what is built on them: the Agents SDK, LangChain,
    pydantic-ai) at the model fake, in every attempt, scripted or not.

    The keys are dummies on purpose: a drill must never reach, or bill, a real model.  Tracing
    exporters that post a run's traces to a vendor whatever the base URL (the Agents SDK's,
    LangSmith's) are turned off.
    """
    return {
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        "OPENAI_BASE_URL": f"{url}/v1",
        "OPENAI_API_BASE": f"{url}/v1",  # the name older LangChain and LiteLLM read
        "OPENAI_API_KEY": "sk-killdrill-fake",
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-ant-killdrill-fake",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
    }


_HARNESS_VAR = re.compile(r"\{(" + envvars.PREFIX + r"[A-Z0-9_]+)\}")


_SERVED_BY = {
    envvars.FAKES_URL: ("HTTP fakes", "--http-fakes"),
    envvars.FAKES_SECRET: ("HTTP fakes", "--http-fakes"),
    envvars.SMTP: ("SMTP fake", "--smtp-fake"),
    envvars.EFFECT_DB: ("effect database", "--effect-db"),
}
"""Harness variables set only when a served fake runs: the flag that starts it."""


def expand_env(env: Mapping[str, str], user: Mapping[str, str]) -> dict[str, str]:
    """``--env`` values may name the harness's variables: ``STRIPE_API_BASE={KILLDRILL_FAKES_URL}``
    is filled per attempt (the fakes' port changes), so an app reads its usual variable."""
    out = dict(env)
    for name in user:
        value = out.get(name)
        if value is None or "{" + envvars.PREFIX not in value:
            continue

        def fill(m: re.Match[str], name: str = name) -> str:
            if m.group(1) not in out:
                off = _SERVED_BY.get(m.group(1))
                if off is None and m.group(1).startswith(envvars.PROXY_PREFIX):
                    off = ("fault proxy of that name", "--proxy NAME=SCHEME://HOST:PORT")
                raise HarnessError(
                    f"--env {name}: {{{m.group(1)}}} is not set for the agent"
                    + (f" (the {off[0]} is off: add {off[1]})" if off else "")
                )
            return out[m.group(1)]

        out[name] = _HARNESS_VAR.sub(fill, value)
    return out


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""
