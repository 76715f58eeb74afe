"""Run a buggy drill while another local user attacks its control channel; print the outcome as JSON.

    python forged_drill.py private|abstract ROOT

Meant to run as root inside a private network namespace (``unshare --net``: abstract sockets
and ``/proc/net/unix`` are per namespace, so the forger sees this drill's sockets and nobody
else's).  ``abstract`` forces the last-resort abstract address.  The forger (uid 65534) forges
``during:payments.charge`` and floods every socket it finds; the settlement agent's ``no_key``
bug must still be reported as ``duplicate_effect``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import killdrill.process.control
from killdrill.drill import Drill, DrillOptions
from killdrill.examples import SETTLEMENT

mode, root = sys.argv[1], sys.argv[2]
if mode == "abstract":
    killdrill.process.control._bind_by_descriptor = lambda *_: None  # type: ignore[attr-defined]
    killdrill.process.control._private_dir_candidates = lambda: []  # type: ignore[attr-defined]
root = os.path.join(root, "ci-workspace-with-a-very-long-path-" + "x" * 70)  # past the 108-byte limit
os.makedirs(root)
# its source as -c, not its path: the other user may not read this checkout (a clone under a
# 0700 folder: the forger never ran, and the test said it found no socket)
forger = subprocess.Popen(
    ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-I",
     "-c", (Path(__file__).parent / "forger.py").read_text(), "during:payments.charge", "60", "300"],
    stdout=subprocess.PIPE, text=True,
)  # fmt: skip
time.sleep(0.3)
drill = Drill([*SETTLEMENT, "--bug", "no_key"], DrillOptions(root=root, timeout=30, discovery_runs=1))
points = drill.points()
case = drill.run_case("during:payments.charge")
forger.terminate()
out = forger.communicate()[0]
print(json.dumps({
    "points": points,
    "kinds": list(case.kinds),
    "outcomes": [a.outcome for a in case.attempts],
    "killed_at": case.attempts[0].killed_at,
    "notes": [n for a in case.attempts for n in a.notes],
    "forger": out.splitlines(),
}))  # fmt: skip
