"""A hostile agent: every attempt leaves processes behind that try hard not to be found.

    python escapees.py KINDS MARKER LATE_FILE

KINDS is a comma-separated subset of ``session,doublefork,noexec,hopper`` (or ``all``):
- session: a child in a new session with an empty environment (``start_new_session=True, env={}``);
- doublefork: a classic daemon (fork, setsid, fork, the middle one exits), exec'd with no environment;
- noexec: a double-forked daemon that never execs (its argv and environ are the agent's or the
  fork template's) and clears ``os.environ``;
- hopper: a daemon that forks again and again, each parent exiting, so its pid keeps changing;
- parricide (not in ``all``): once the others are out, the agent SIGKILLs its parent (under
  killdrill, the attempt's keeper) and dies with it;
- regicide (not in ``all``): the same, but it SIGKILLs its grandparent (the fork template).

Every escapee carries MARKER: in its argv when it execs, as its process name (``/proc/PID/comm``,
``PR_SET_NAME``) when it does not.  Every escapee appends ``KIND PID`` to LATE_FILE every 20 ms:
an effect sent after "the kill" if it survives.  Then the agent works through two named steps;
while LATE_FILE.hold exists, the first step takes a minute (an attempt caught mid-step).
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

import killdrill

KINDS = ("session", "doublefork", "noexec", "hopper")
# argv: MARKER KIND LATE_FILE
SLEEPER = """
import os, sys, time
while True:
    with open(sys.argv[3], "a") as f:
        f.write(f"{sys.argv[2]} {os.getpid()}\\n")
    time.sleep(0.02)
"""


def set_name(marker: str) -> None:
    libc = ctypes.CDLL(None)
    libc.prctl(15, marker[:15].encode(), 0, 0, 0)  # PR_SET_NAME


def live_on(marker: str, late: str, kind: str) -> None:
    """The body of a daemon that never execs: it sends effects (or hops) until it is killed."""
    set_name(marker)
    os.environ.clear()
    while True:
        if kind == "hopper" and os.fork() != 0:
            os._exit(0)  # the parent leaves; the child carries on under a new pid
        try:
            with open(late, "a") as f:
                f.write(f"{kind} {os.getpid()}\n")
        except OSError:
            pass
        time.sleep(0.02)


def kinds_seen(late: str) -> set[str]:
    try:
        with open(late) as f:
            return {line.split()[0] for line in f if line.strip()}
    except OSError:
        return set()


def escape(kind: str, marker: str, late: str) -> None:
    if kind in ("parricide", "regicide"):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(kinds_seen(late)) < len(KINDS):
            time.sleep(0.01)  # every other escapee is up and sending effects
        target = os.getppid()
        if kind == "regicide":
            with open(f"/proc/{target}/stat") as f:
                target = int(f.read().rsplit(")", 1)[1].split()[1])
        os.kill(target, signal.SIGKILL)
        time.sleep(60)  # PR_SET_PDEATHSIG ends us; without it, the kill of the attempt does
    if kind == "session":
        argv = [sys.executable, "-c", SLEEPER, marker, kind, late]
        subprocess.Popen(argv, start_new_session=True, env={})
        return
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)  # the middle process exits at once: the daemon is orphaned
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        if kind == "doublefork":
            os.execve(sys.executable, [sys.executable, "-c", SLEEPER, marker, kind, late], {})
        live_on(marker, late, kind)
    finally:
        os._exit(0)


def main() -> None:
    kinds, marker, late = sys.argv[1], sys.argv[2], sys.argv[3]
    for kind in kinds.split(","):
        for one in KINDS if kind == "all" else (kind,):
            escape(one, marker, late)
    with killdrill.node("work"):
        time.sleep(60 if os.path.exists(late + ".hold") else 0.05)
    with killdrill.node("finish"):
        time.sleep(0.05)


if __name__ == "__main__":
    main()
