"""A three-step agent with no effects, fast to start (no ledger import), for the plugin's tests.

Its checkpoint is a JSON file in the workdir.  ``--log PATH`` appends each process's thread id,
so a test can count discovery runs; ``--restart`` ignores the checkpoint and re-runs from the
first step (counted as a defect only through its effects, so it still passes); ``--fail-resume``
exits 1 on any attempt after the first: the resume cannot complete (``resume_failed``).
"""

from __future__ import annotations

import argparse
import json
import os

import killdrill


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--log")
    parser.add_argument("--fail-resume", action="store_true")
    args = parser.parse_args()
    if args.log:
        with open(args.log, "a") as f:
            f.write(args.thread + "\n")
    if args.fail_resume and int(os.environ.get("KILLDRILL_ATTEMPT", "1")) > 1:
        raise SystemExit("cannot resume: the checkpoint format is not understood")
    done: list[str] = []
    if os.path.exists(args.state):
        with open(args.state) as f:
            done = json.load(f)
    for step in ("plan", "act", "report"):
        if step in done:
            continue
        with killdrill.node(step):
            pass
        done.append(step)
        with open(args.state + ".tmp", "w") as f:
            json.dump(done, f)
        os.replace(args.state + ".tmp", args.state)


if __name__ == "__main__":
    main()
