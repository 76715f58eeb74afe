"""Another local user posting forged charges to every HTTP server listening on 127.0.0.1.

    python http_forger.py SECONDS

Finds listening ports in the world-readable ``/proc/net/tcp`` and posts a Stripe charge and a
generic ``payments.charge`` to each, over and over, with the paths an attacker would guess.
Prints ``PORT STATUS`` the first time it sees each answer status on a port.  Stdlib only.
"""

from __future__ import annotations

import collections
import http.client
import json
import sys
import time

seconds = float(sys.argv[1])
seen: collections.Counter[tuple[int, int | str]] = collections.Counter()
deadline = time.monotonic() + seconds
FORGED = [
    ("/v1/payment_intents", "amount=999&currency=usd", "application/x-www-form-urlencoded"),
    ("/fakes/payments/charge", json.dumps({"amount": 999, "idempotency_key": "forged"}), "application/json"),
]
while time.monotonic() < deadline:
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    ports = {int(r[1].split(":")[1], 16) for r in rows if r[3] == "0A" and r[1].startswith("0100007F")}
    for port in ports:
        for path, body, kind in FORGED:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request(
                    "POST", path, body=body, headers={"Content-Type": kind, "X-Killdrill-Attempt": "1"}
                )
                outcome: int | str = conn.getresponse().status
                conn.close()
            except (OSError, http.client.HTTPException) as exc:
                outcome = type(exc).__name__
            if not seen[(port, outcome)]:
                print(port, outcome, flush=True)
            seen[(port, outcome)] += 1
    time.sleep(0.005)
