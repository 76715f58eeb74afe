"""A runtime's floor: what one drill case does, done by plain processes without killdrill's harness.

A case (killdrill/drill/case.py) is attempt 1 killed at its point, then attempt 2 resumed under the
same thread and workdir until the run completes.  Its floor is the same two runs as plain
``python -m tests.benchmarks.floor_agent`` processes (a fresh interpreter each, as a user runs the
agent by hand): the first kills its own process group at the point (tests/benchmarks/
floor_agent.py), the second recovers and finishes.  What the agent needs around it is there before
the clock starts, as a user's environment is: the runtime's server or broker (the drill's own
service, one namespace or key prefix per case as the drill gives), and for an agent that talks to
a model and providers over the wire, the HTTP and SMTP fakes.  A ``during:`` point the HTTP fakes
announce (the agent's call went over the wire) is killed from here, by a listener standing in for
the supervisor, as the agent cannot see it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class KillAt:
    """A control listener for the HTTP/SMTP fakes' ``during:`` announcements: it SIGKILLs the
    process group ``pgid`` at the point, and lets every other point go."""

    def __init__(self, folder: Path, point: str | None) -> None:
        self.point = point
        self.pgid: int | None = None
        self.path = str(folder / "ctl.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.seen = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            reader.readline()  # the hello
            for line in reader:
                point = json.loads(line).get("point")
                if point == self.point and self.pgid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.pgid, signal.SIGKILL)
                    return  # never answered: the caller never hears, as under the drill
                conn.sendall(b'{"go": true}\n')

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def wire_fakes(options: Any, ledger: str, thread: str, kill: KillAt) -> Iterator[dict[str, str]]:
    """The HTTP fakes (with the scripted model) and the SMTP fake, as a drill gives them; their
    ``during:`` points go to ``kill``.  Yields the environment that points the agent at them."""
    from killdrill.drill.env import expand_env, model_env
    from killdrill.fakes.http import FakesServer
    from killdrill.fakes.model import ModelFake
    from killdrill.fakes.model_script import load_script

    model = ModelFake(load_script(options.model_script)) if options.model_script else None
    http = FakesServer(ledger, thread=thread, model=model)
    url = http.start()
    http.bind(thread, 1, kill.path, "floor")
    env = {**model_env(url), "KILLDRILL_FAKES_URL": url, "KILLDRILL_FAKES_SECRET": http.secret}
    smtp = None
    if options.smtp_fake:
        from killdrill.fakes.wire.smtp import SmtpFake

        smtp = SmtpFake(ledger, thread=thread)
        env["KILLDRILL_SMTP"] = smtp.start()
        smtp.bind(thread, 1, kill.path, "floor")
    try:
        yield expand_env({**env, **options.env}, options.env)
    finally:
        http.stop()
        if smtp is not None:
            smtp.stop()


def floor_case(
    drill: Any, integration: str, command: tuple[str, ...], point: str, root: Path
) -> dict[str, Any]:
    """One case's two plain runs; returns their seconds (the runtime's environment set up
    beforehand, off the clock) and how each ended."""
    from killdrill.drill.env import fill
    from killdrill.drill.workdirs import RunContext

    options = drill.options
    workdir = root / f"floor-{uuid.uuid4().hex[:10]}"
    (workdir / ".killdrill").mkdir(parents=True)
    thread = f"kd-{uuid.uuid4().hex[:12]}"
    ledger = str(workdir / ".killdrill" / "ledger.sqlite")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    env.update(options.env, KILLDRILL_LEDGER=ledger)
    run = RunContext(workdir, thread)
    env.update(drill.setup._service_env(run))  # the runtime's server / broker, as the drill's
    assert command[:2] == ("python", "-m"), command
    argv = [command[2], *fill(list(command[3:]), thread, str(workdir))]  # the module, its arguments
    kill = KillAt(workdir, point)
    codes: list[int] = []
    with contextlib.ExitStack() as stack:
        if options.http_fakes or options.model_script:
            env.update(stack.enter_context(wire_fakes(options, ledger, thread, kill)))
        t0 = time.perf_counter()
        for armed in (True, False):
            cmd = [sys.executable, "-m", "tests.benchmarks.floor_agent", "--integration", integration]
            cmd += ["--kill", point] if armed else []
            proc = subprocess.Popen(
                [*cmd, *argv],
                env={**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))},
                cwd=str(REPO),
                stdout=subprocess.DEVNULL,
                stderr=open(workdir / f"floor-{len(codes) + 1}.stderr", "wb"),  # noqa: SIM115
                start_new_session=True,
            )
            kill.pgid = proc.pid if armed else None
            codes.append(proc.wait(timeout=120))
        seconds = time.perf_counter() - t0
    kill.close()
    drill.setup.release(run)
    return {"s": seconds, "codes": codes, "ok": codes[0] == -signal.SIGKILL and codes[1] == 0}
