"""The floor of a forked drill: its cases forked from one preloaded process, with no harness.

    python -m tests.benchmarks.fork_floor [--preload M ...] [--integration NAME ...]
        --point P [--point P ...] -- python -m MODULE ARGS...   ({thread}, {workdir} filled in)

What ``--launcher fork`` cannot go below on a given agent: one interpreter imports what the
drill's template imports (``killdrill``, its fakes and effects, the integration's preloads), then
for each point forks attempt 1, which SIGKILLs itself when the point is reached (the stand-in of
the agent's control client, ``floor_agent.SelfKill``), and attempt 2, which resumes under the same
thread and workdir to its end.  No supervisor, keeper, control channel, ledger read, verdict or
discovery.  The prefork row divides the spawn drill by this as well as by the fork drill: the
ratio no harness could pass on that agent and machine.  Prints ``{"cases", "killed", "resumed"}``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import shutil
import sys
import tempfile
import time

import killdrill.agent as agent
from tests.benchmarks.floor_agent import SelfKill


def _attempt(argv: list[str], workdir: str, thread: str, kill: str | None) -> int:
    """Fork one attempt of ``python -m MODULE ARGS`` and wait for it; its wait status."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)  # SelfKill kills its process group: the attempt's, not this one
            os.chdir(workdir)
            os.environ.update(
                KILLDRILL_LEDGER=os.path.join(workdir, "ledger.sqlite"),
                KILLDRILL_WORKDIR=workdir,
                KILLDRILL_THREAD=thread,
            )
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            if kill is not None:
                agent._client = SelfKill(kill)  # type: ignore[assignment]
                agent._init = lambda: agent._client  # type: ignore[assignment]
            args = [a.replace("{thread}", thread).replace("{workdir}", workdir) for a in argv]
            sys.argv = [args[2], *args[3:]]
            sys.path[0] = workdir
            runpy.run_module(args[2], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.fork_floor")
    parser.add_argument("--preload", action="append", default=[])
    parser.add_argument("--integration", action="append", default=[])
    parser.add_argument("--point", action="append", required=True)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if len(argv) < 3 or argv[1] != "-m":
        parser.error("the command must be: python -m MODULE ARGS...")
    from killdrill.integrations import find, preload_modules
    from killdrill.process.forks import DEFAULT_PRELOAD

    for name in [*DEFAULT_PRELOAD, *args.preload, *preload_modules(args.integration)]:
        importlib.import_module(name)
    for name in args.integration:
        activate = find(name).activate
        if activate is not None:
            activate()
    root = tempfile.mkdtemp(prefix="killdrill-fork-floor-")
    killed = resumed = 0
    try:
        for i, point in enumerate(args.point):
            workdir = os.path.join(root, f"case-{i}")
            os.mkdir(workdir)
            thread = f"floor-{i}-{time.monotonic_ns()}"
            status = _attempt(argv, workdir, thread, point)
            killed += os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9
            status = _attempt(argv, workdir, thread, None)
            resumed += os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"cases": len(args.point), "killed": killed, "resumed": resumed}))


if __name__ == "__main__":
    main()
