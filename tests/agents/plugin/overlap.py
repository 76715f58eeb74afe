"""A two-step agent whose processes tell whether cases ran at once, for the plugin's ``workers=N``.

``--log PATH`` appends the case's workdir name and attempt number as each process starts.
``--meet DIR``: the first attempt of a case (not a discovery run) waits at most ``--meet-wait``
seconds, before any kill point, for another case's first attempt to be waiting too, and logs
``met`` or ``alone``: run one after another, no case ever meets another.  ``--naive`` charges
without an idempotency key (a kill after the charge charges twice); ``--fail-resume`` exits 1
on every attempt after the first (``resume_failed``).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import killdrill
from killdrill.fakes import connect


def log(path: str | None, line: str) -> None:
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def meet(folder: str, me: str, wait: float) -> bool:
    """Wait for another case's process in ``folder``; each leaves it when done waiting."""
    mine = os.path.join(folder, me)
    open(mine, "w").close()
    try:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if any(name != me for name in os.listdir(folder)):
                time.sleep(0.2)  # the other one sees this one too before it leaves
                return True
            time.sleep(0.02)
        return False
    finally:
        os.unlink(mine)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--log")
    parser.add_argument("--meet")
    parser.add_argument("--meet-wait", type=float, default=3.0)
    parser.add_argument("--naive", action="store_true")
    parser.add_argument("--fail-resume", action="store_true")
    args = parser.parse_args()
    case = os.path.basename(os.path.dirname(args.state))
    attempt = int(os.environ.get("KILLDRILL_ATTEMPT", "1"))
    discovery = "killdrill-discovery" in args.state
    log(args.log, f"start {case} {attempt}" + (" discovery" if discovery else ""))
    if args.meet and attempt == 1 and not discovery:
        log(args.log, f"{'met' if meet(args.meet, case, args.meet_wait) else 'alone'} {case}")
    if args.fail_resume and attempt > 1:
        raise SystemExit("cannot resume: the checkpoint format is not understood")
    done: list[str] = []
    if os.path.exists(args.state):
        with open(args.state) as f:
            done = json.load(f)

    def checkpoint(step: str) -> None:
        done.append(step)
        with open(args.state + ".tmp", "w") as f:
            json.dump(done, f)
        os.replace(args.state + ".tmp", args.state)

    fakes = connect()
    if "charge" not in done:
        with killdrill.node("charge"):
            key = None if args.naive else f"{args.thread}:charge"
            fakes.payments.charge(idempotency_key=key, amount=100, account="acme")
        checkpoint("charge")
    if "report" not in done:
        with killdrill.node("report"):
            pass
        checkpoint("report")


if __name__ == "__main__":
    main()
