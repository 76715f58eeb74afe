"""The fork template process (``python -m killdrill.process.template FD``): forks one keeper per attempt.

Started by killdrill.process.forks.ForkTemplate; speaks its JSON-lines protocol on the socket ``FD``.
It is a child subreaper: orphans of a keeper that died hard are re-parented to it, and it
kills them.  When the harness's end of the socket closes (even on SIGKILL) it has every keeper
clean its attempt, kills whatever is left under it, and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Collection
from typing import Any, NoReturn

from killdrill import envvars
from killdrill.process import containment


def _forget_temp_dir() -> None:
    """The agent's temporary folder is its ``TMPDIR``, not the one the template looked up
    (``tempfile`` and multiprocessing keep the first they found)."""
    import tempfile

    tempfile.tempdir = None
    mp = sys.modules.get("multiprocessing.process")
    if mp is not None:
        mp.current_process()._config.pop("tempdir", None)


def _run_python(spec: dict[str, Any]) -> NoReturn:
    """In a forked agent: run ``spec["argv"]`` (``python -m mod`` / ``python x.py``) as ``__main__``."""
    code = 1
    try:
        os.environ.clear()
        os.environ.update(spec["env"])
        _forget_temp_dir()
        if os.environ.get(envvars.LISTEN_MARK):  # a service probed on a port: as the bootstrap does
            from killdrill.agent.listen_mark import install

            install()
        _show_drill_env(spec)
        import random

        random.seed()
        argv = spec["argv"][1:]
        import runpy

        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            import atexit

            atexit._run_exitfuncs()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _show_drill_env(spec: dict[str, Any]) -> None:
    """A forked agent's ``/proc/PID/environ`` shows the template's environment, not its own: a
    process it starts with a stripped environment (an MCP server) finds the drill's variables in
    ``killdrill-env-PID.json`` beside the attempt's stderr instead, through the descriptor held
    open here for the agent's life (killdrill.fakes.locate reads ``/proc/PID/fd``)."""
    drill = {k: v for k, v in spec["env"].items() if k.startswith(envvars.PREFIX)}
    path = os.path.join(os.path.dirname(os.path.abspath(spec["stderr"])), f"killdrill-env-{os.getpid()}.json")
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(drill, f)
        os.open(path, os.O_RDONLY)  # kept open (not inherited): the agent's fd table names the file


def _run_forked(spec: dict[str, Any], report_fd: int, err_fd: int) -> NoReturn:
    """In the keeper's forked child: set the agent up and run it (closing the keeper's
    ``report_fd``: an agent must not write the keeper's lines)."""
    os.close(report_fd)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the template ignores it; agents must not
    try:
        containment.setup_agent(err_fd, spec.get("cwd"), spec["stdout"], spec["stderr"])
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.write(err_fd, f"cannot start {spec['argv'][0]!r}: {exc.strerror or exc}".encode())
        os._exit(127)
    containment.say_started(err_fd)  # no exec to close it
    _run_python(spec)


def _agent_starter(
    spec: dict[str, Any], data: bytes, report_fd: int, ahead: containment.AgentAhead | None
) -> Callable[[], int]:
    """How the keeper starts the agent: spawn the command, or run the Python module in the
    agent forked ahead (``ahead``, given ``data``, the spec as sent), or in a fork made now."""
    if spec.get("exec"):
        if ahead is not None:
            ahead.discard()
        return lambda: containment.spawn_agent(
            spec["argv"], spec["env"], spec.get("cwd"), spec["stdout"], spec["stderr"]
        )

    def fork_now() -> int:
        return containment.fork_agent(lambda err_fd: _run_forked(spec, report_fd, err_fd))

    if ahead is None:
        return fork_now
    return lambda: ahead.start(data) or fork_now()


def _read_line(fd: int) -> bytes:
    """Read one line from a pipe, byte by byte: what follows it is read later."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line


class _Keeper:
    """A keeper forked ahead of its attempt: it waits for the attempt's spec on ``spec_w``."""

    def __init__(self, pid: int, spec_w: int, report_r: int) -> None:
        self.pid, self.spec_w, self.report_r = pid, spec_w, report_r


def _fork_keeper(inherited: list[int], agent_ahead: bool = False) -> _Keeper:
    """Fork a keeper that waits, idle, for one attempt's spec (EOF without one: it exits).

    The template keeps one forked ahead, so an attempt's start pays no fork of the template
    (with ``posix_spawn`` in the keeper: 6.2 -> 3.4 ms from the harness's request to the agent's
    start, measured on 2 cores).  ``agent_ahead`` (a template whose attempts are forks of it):
    the keeper forks its agent ahead too, which waits for the same spec.
    """
    spec_r, spec_w = os.pipe()
    report_r, report_w = os.pipe()
    template = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(report_r)
            os.close(spec_w)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in inherited:
                os.close(fd)
            ahead = None
            if agent_ahead:
                ahead = containment.fork_agent_ahead(
                    lambda spec, err_fd: _run_forked(json.loads(spec), report_w, err_fd), close=(spec_r,)
                )
            data = containment.read_all(spec_r)
            if not data:
                os._exit(0)  # the agent forked ahead reads EOF too, and exits
            spec = json.loads(data)
        except BaseException:
            os._exit(1)
        containment.keeper(_agent_starter(spec, data, report_w, ahead), report_w, template)
    os.close(spec_r)
    os.close(report_w)
    return _Keeper(pid, spec_w, report_r)


def _spare(inherited: list[int], agent_ahead: bool) -> _Keeper | None:
    """A keeper for the next attempt, or None if the fork failed now (the attempt forks its own,
    and says why if that fails too)."""
    try:
        return _fork_keeper(inherited, agent_ahead)
    except OSError:
        return None


def _hand_over(spec: bytes, keeper: _Keeper) -> bool:
    """Give a waiting keeper its attempt; False if it is gone (killed while it waited)."""
    if containment.send_all(keeper.spec_w, spec):
        return True
    os.close(keeper.report_r)
    return False


def _spawn(
    spec: dict[str, Any], spare: _Keeper | None, inherited: list[int]
) -> tuple[int | None, int, dict[str, Any]]:
    """Start an attempt under the spare keeper (or a new one); return the keeper's pid, its report
    pipe and the reply for the harness."""
    data = json.dumps(spec).encode()
    keeper = spare if spare is not None and _hand_over(data, spare) else None
    if keeper is None:
        try:
            keeper = _fork_keeper(inherited)
        except OSError as exc:  # out of processes or memory: this attempt fails, the template stays
            return None, -1, {"error": f"cannot fork the attempt's keeper: {exc.strerror or exc}"}
        _hand_over(data, keeper)
    reply = _read_line(keeper.report_r).decode("utf-8", "replace").strip()
    if reply.startswith("pid "):
        return keeper.pid, keeper.report_r, {"pid": int(reply[4:]), "keeper": keeper.pid}
    os.close(keeper.report_r)
    return None, -1, {"error": reply.removeprefix("error ") or "the attempt's keeper failed to start"}


def _ended(keeper: int, status: int, report: int, keepers: Collection[int]) -> int:
    """The agent's exit code, from the keeper's last line; a keeper killed before writing it
    leaves its orphans to us (we are a subreaper): kill them before the harness hears of the end."""
    os.set_blocking(report, False)
    try:
        rest = os.read(report, 4096).decode("utf-8", "replace")
    except OSError:
        rest = ""
    os.close(report)
    if rest.startswith("exit "):
        return int(rest.split()[1])
    while containment.freeze_and_kill(os.getpid(), spare=keepers):
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
    return os.waitstatus_to_exitcode(status)


def _shutdown(keepers: dict[int, tuple[int, int]], spare: _Keeper | None) -> None:
    """The harness is gone: have every keeper clean its attempt, then kill whatever is left."""
    import time

    if spare is not None:
        os.close(spare.spec_w)  # EOF: the idle keeper exits

    for keeper in keepers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(keeper, signal.SIGCONT)
            os.kill(keeper, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while keepers and time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid:
            keepers.pop(pid, None)
        else:
            time.sleep(0.005)
    containment.kill_and_reap_all(-1, None)  # orphans of keepers that died hard are ours (subreaper)


def _preload_error(name: str, exc: BaseException, imported: set[str]) -> str:
    """Why ``--preload NAME`` failed, in one line: a script that runs (parses argv, exits) at
    import cannot be preloaded, but the libraries it imported before it ran can."""
    text = f"cannot preload {name}: {exc.__class__.__name__}: {exc}"
    if not isinstance(exc, SystemExit):
        return text
    skip = {name.partition(".")[0], "killdrill", "__main__", *sys.stdlib_module_names}
    libs = sorted({m.partition(".")[0] for m in imported} - skip)
    instead = (
        "preload the libraries it imports instead: " + " ".join(f"--preload {m}" for m in libs)
        if libs
        else "preload the libraries it imports instead (or nothing: a script alone gains little)"
    )
    return (
        f"{text}: importing {name} ran it as a script (it parses argv or exits at import, and a "
        f"preloaded module is imported once, without the agent's arguments); {instead}"
    )


def _template(fd: int) -> None:
    import gc
    import importlib
    import selectors

    containment.prctl(containment.PR_SET_CHILD_SUBREAPER, 1)
    sock = socket.socket(fileno=fd)
    reader = sock.makefile("rb")

    def send(msg: dict[str, Any]) -> None:
        sock.sendall(json.dumps(msg).encode() + b"\n")

    hello = json.loads(reader.readline() or "{}")
    for name in hello.get("preload", ()):
        had = set(sys.modules)
        try:
            importlib.import_module(name)
        except BaseException as exc:
            send({"error": _preload_error(name, exc, set(sys.modules) - had)})
            return
    if threading.active_count() > 1:
        send({"error": f"preloading started {threading.active_count() - 1} thread(s): forking is unsafe"})
        return
    # What was imported lives as long as an attempt does: its collections need not walk it again
    # (nor touch its pages, copied on write): 2.5-3.7% off a forked web app's case (figures.md).
    gc.collect()
    gc.freeze()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # we stop when the harness's socket closes
    send({"ready": True})
    keepers: dict[int, tuple[int, int]] = {}  # keeper pid -> (agent pid, keeper's report pipe)
    inherited = [fd, wake_r, wake_w]  # what a keeper closes: the template's own channels
    forks = False  # the last attempt ran forked from this template: the spare forks its agent ahead
    spare = _spare(inherited, forks)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    buffer = b""
    try:
        while True:
            for key, _ in sel.select():
                if key.fileobj == wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 4096)
                    continue
                data = sock.recv(65536)
                if not data:
                    return
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    spec = json.loads(line)["spawn"]
                    keeper, report, reply = _spawn(spec, spare, inherited)
                    spare = None
                    if keeper is not None:
                        keepers[keeper] = (reply["pid"], report)
                    send(reply)
                    forks = not spec.get("exec")
                    spare = _spare(inherited, forks)  # for the next attempt, while this one starts
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                if pid in keepers:  # the keeper exits last, once nothing of the attempt is left
                    agent, report = keepers.pop(pid)
                    others = {*keepers, *([spare.pid] if spare is not None else [])}
                    send({"exit": agent, "code": _ended(pid, status, report, others)})
                elif spare is not None and pid == spare.pid:  # the idle keeper died (killed): fork another
                    os.close(spare.spec_w)
                    os.close(spare.report_r)
                    spare = _spare(inherited, forks)
    finally:
        _shutdown(keepers, spare)


if __name__ == "__main__":
    # Once the attempts are cleaned up, skip the interpreter's teardown of the preloaded modules
    # (about a second of CPU with a framework loaded): nothing of a drill should outlive it by that.
    code = 0
    try:
        _template(int(sys.argv[1]))
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os._exit(code)
