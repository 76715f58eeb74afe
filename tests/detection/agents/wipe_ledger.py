"""An agent that tidies its workdir when it restarts after a crash.

``python wipe_ledger.py --thread T --workdir W [--bug wipe_all]``

Correct: on a restart it removes its own scratch files (``scratch/*.tmp``) and resumes.
``--bug wipe_all``: it removes every SQLite file in the workdir except its checkpoint
(DEFECT): that includes the provider ledger, so the charge it repeats looks like the first.
"""

import sys
from pathlib import Path

BUG = "--bug" in sys.argv
if BUG:
    sys.argv[sys.argv.index("--bug") : sys.argv.index("--bug") + 2] = []
workdir = Path(sys.argv[sys.argv.index("--workdir") + 1])
if (workdir / "ckpt.sqlite").exists():  # a restart: tidy up before resuming
    pattern = "**/*.sqlite*" if BUG else "scratch/*.tmp"  # DEFECT if BUG
    for path in workdir.glob(pattern):
        if not path.name.startswith("ckpt.sqlite"):
            path.unlink()

from _kit import Run  # noqa: E402

run = Run()
(run.workdir / "scratch").mkdir(exist_ok=True)
(run.workdir / "scratch" / "draft.tmp").write_text("draft")
amount = run.step("price", lambda: 2500)


def charge() -> str:
    key = f"{run.thread}:charge"
    return run.fakes.payments.charge(idempotency_key=key, account="acct_wipe", amount=amount)["id"]


run.step("charge", charge)
run.step("notify", lambda: run.fakes.webhooks.post(idempotency_key=f"{run.thread}:done", event="paid")["id"])
