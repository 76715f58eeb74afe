"""One plain run of a bundled example that kills itself at a point: the floor of a drill's case.

    python -m tests.benchmarks.floor_agent [--kill POINT] [--integration NAME] MODULE ARGS...

No supervisor, no control channel, no template: the example runs as ``python -m MODULE`` would,
with its integration's patches active (they name the point; a few microseconds a point), and
``killdrill.agent``'s client replaced by one that SIGKILLs this process group when ``POINT``
(``NAME[#N]``) is reached in this process.  A process the agent forks (Celery's worker) gets its
own such client.  Without ``--kill`` the run goes to its end: the resume.
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import sys


class SelfKill:
    """The stand-in of ``killdrill.agent.ControlClient``: counts ``point`` and kills at its N-th."""

    def __init__(self, point: str) -> None:
        name, _, n = point.partition("#")
        self.point, self.nth, self.seen = name, int(n or 1), 0

    def send(self, point: str) -> None:
        if point == self.point:
            self.seen += 1
            if self.seen == self.nth:
                os.killpg(os.getpgrp(), signal.SIGKILL)


class Unarmed:
    def send(self, point: str) -> None:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.floor_agent")
    parser.add_argument("--kill", help="the point to kill this process group at")
    parser.add_argument("--integration", action="append", default=[])
    parser.add_argument("module")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    import killdrill.agent as agent
    from killdrill.integrations import find

    for name in args.integration:
        activate = find(name).activate
        if activate is not None:
            activate()
    if args.kill:

        def init() -> object:  # also after a fork: the child reads it afresh, as the agent API does
            agent._client = SelfKill(args.kill)  # type: ignore[assignment]
            return agent._client

        agent._init = init  # type: ignore[assignment]
        agent._client = None
    sys.argv = [args.module, *args.args]
    runpy.run_module(args.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
