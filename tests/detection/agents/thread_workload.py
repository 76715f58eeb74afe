"""Thread-dependent work: the account read for the thread decides one or two notifications.

``python thread_workload.py --thread T --workdir W [--bug uuid_key]``

Half the threads belong to accounts with a second contact, so a clean run under one thread
posts one webhook and under another two.  Correct: each notification's key names it.
``--bug uuid_key``: the notification key is a uuid4 (DEFECT), new on every attempt.
"""

import hashlib
import sys
import uuid

from _kit import Run

BUG = "--bug" in sys.argv
if BUG:
    sys.argv[sys.argv.index("--bug") : sys.argv.index("--bug") + 2] = []

run = Run()


def contacts() -> list[str]:
    """The account's contacts, as the CRM returns them for this thread (a pure read)."""
    digest = hashlib.sha256(run.thread.encode()).digest()
    return ["ops@acme.test"] + (["cfo@acme.test"] if digest[0] % 2 else [])


people = run.step("load_account", contacts)
for i, person in enumerate(people):

    def notify(person: str = person, i: int = i) -> str:
        key = f"notify-{uuid.uuid4()}" if BUG else f"{run.thread}:notify:{i}"  # DEFECT if BUG
        return run.fakes.webhooks.post(idempotency_key=key, event="invoice.ready", to=person)["id"]

    run.step(f"notify_{i}", notify)
