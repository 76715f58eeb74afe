"""The agent-side API outside a drill: a no-op that reads its environment lazily."""

import asyncio
import os
import subprocess
import sys

import killdrill
from killdrill import agent


def test_unarmed_boundary_is_a_no_op(monkeypatch) -> None:
    monkeypatch.delenv("KILLDRILL_CONTROL", raising=False)
    agent._after_fork_in_child()  # forget the environment read so far
    killdrill.boundary("before:anything")
    assert killdrill.armed() is False


def test_environment_is_read_at_first_call_not_import() -> None:
    code = (
        "import os, killdrill\n"
        "os.environ['KILLDRILL_CONTROL'] = '/nonexistent/ctl.sock'\n"
        "try:\n"
        "    killdrill.boundary('before:x')\n"
        "except killdrill.ControlChannelError as e:\n"
        "    print('armed late:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "armed late: killdrill: cannot reach the supervisor at /nonexistent/ctl.sock" in out.stdout


def test_node_decorates_sync_and_async_functions(monkeypatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(agent, "boundary", seen.append)

    @killdrill.node("sync_step")
    def step(x: int) -> int:
        return x + 1

    @killdrill.node("async_step")
    async def astep(x: int) -> int:
        return x * 2

    assert step(1) == 2
    assert asyncio.run(astep(2)) == 4
    assert step.__name__ == "step"
    with killdrill.node("ctx"):
        pass
    try:
        with killdrill.node("fails"):
            raise ValueError
    except ValueError:
        pass
    assert seen == [
        "before:sync_step",
        "after:sync_step",
        "before:async_step",
        "after:async_step",
        "before:ctx",
        "after:ctx",
        "before:fails",
    ]
