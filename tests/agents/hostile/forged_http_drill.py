"""Drill the correct Stripe agent over the HTTP fakes while another user forges charges; print JSON.

    python forged_http_drill.py ROOT

Meant to run as root inside ``unshare --net`` (the forger sees this drill's ports and nobody
else's).  The agent sends a stable key, so every case must be exactly-once, forger or not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from killdrill.drill import Drill, DrillOptions

root = sys.argv[1]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
# its source as -c, not its path: the other user may not read this checkout (a clone under a
# 0700 folder: the forger never ran, and the test said it found no socket)
forger = subprocess.Popen(
    ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-I",
     "-c", (Path(__file__).parent / "http_forger.py").read_text(), "60"],
    stdout=subprocess.PIPE, text=True,
)  # fmt: skip
time.sleep(0.3)
agent = ["python", "-m", "killdrill.examples.stripe_agent", "--thread", "{thread}"]
agent += ["--state", "{workdir}/agent-state.json"]
drill = Drill(
    agent, DrillOptions(root=os.path.join(root, "runs"), http_fakes=True, timeout=60, discovery_runs=1)
)
cases = [drill.run_case(point) for point in ("during:payments.charge", "after:charge_customer")]
forger.terminate()
print(json.dumps({
    "ok": [case.ok for case in cases],
    "texts": [case.text() for case in cases if not case.ok],
    "charges": [[c.outcome for c in (case.ledger.calls if case.ledger else ())] for case in cases],
    "forger": forger.communicate()[0].splitlines(),
}))  # fmt: skip
