"""A CrewAI Flow as users write it: ``@start``/``@listen`` methods, state saved by ``@persist``.

    python -m killdrill.examples.onboarding_crewai --thread T --workdir DIR [--bug rerun_finished]

Methods, in order: ``create_account`` -> ``charge_first_month`` -> ``send_welcome`` ->
``activate``.  ``@persist(SQLiteFlowPersistence(DIR/flows.db))`` saves the state after each
method (the CrewAI integration's ``committed:METHOD``).  The flow's state id is the thread,
and every start is ``kickoff(inputs={"id": thread})``: CrewAI reloads the persisted state
under that id, but **not** the set of completed methods, so every method runs again, the
finished ones too (the documented behaviour of ``inputs.id`` hydration).

The correct form (no ``--bug``) skips what the persisted state says is done (a flag per
effect-bearing method) and makes the window between an effect and the save safe: the charge
and the ticket-free account record carry keys derived from the thread; the welcome email
carries ``ref`` and is looked up (``mailbox.lookup``) before it is sent, so a kill after the
send and before the save does not send it twice.

``--bug rerun_finished`` is the field bug: the flow trusts ``kickoff(inputs={"id": ...})`` to
resume where it stopped, so ``send_welcome`` has no done-flag and no lookup.  A kill once the
email's method was persisted (``committed:send_welcome``, or any later point) re-runs it on
resume and the email goes out twice: ``duplicate_effect`` on ``mailbox.send``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from killdrill.fakes import connect

BUGS = ("rerun_finished",)


def build_flow(thread: str, workdir: str, *, bug: str | None) -> Any:
    """The Flow class (built here so CrewAI is imported only when the example runs)."""
    from crewai.flow.flow import Flow, FlowState, listen, start
    from crewai.flow.persistence import SQLiteFlowPersistence, persist

    fakes = connect()
    guarded = bug != "rerun_finished"

    class Onboarding(FlowState):
        email: str = "new.user@example.com"
        plan_cents: int = 4900
        account_id: str = ""
        charge_id: str = ""
        welcome_sent: bool = False
        active: bool = False

    @persist(SQLiteFlowPersistence(db_path=os.path.join(workdir, "flows.db")))
    class OnboardingFlow(Flow[Onboarding]):
        @start()
        def create_account(self) -> str:
            if not self.state.account_id:
                self.state.account_id = f"acct_{thread}"
                fakes.kv.set(f"account/{self.state.account_id}", {"email": self.state.email})
            return self.state.account_id

        @listen(create_account)
        def charge_first_month(self, account_id: str) -> str:
            if guarded and self.state.charge_id:
                return self.state.charge_id
            charge = fakes.payments.charge(
                idempotency_key=f"{thread}:charge_first_month",
                account=account_id,
                amount=self.state.plan_cents,
                currency="usd",
            )
            self.state.charge_id = charge["id"]
            return self.state.charge_id

        @listen(charge_first_month)
        def send_welcome(self, charge_id: str) -> str:
            ref = f"{thread}:welcome"
            if guarded and (self.state.welcome_sent or fakes.mailbox.lookup(ref) is not None):
                self.state.welcome_sent = True
                return ref
            fakes.mailbox.send(
                to=self.state.email,
                subject="Welcome aboard",
                body=f"Your first month is paid ({self.state.plan_cents} cents).",
                ref=ref,
            )
            self.state.welcome_sent = True
            return ref

        @listen(send_welcome)
        def activate(self, ref: str) -> bool:
            fakes.kv.set(f"account/{self.state.account_id}/status", "active")
            self.state.active = True
            return True

    return OnboardingFlow


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.onboarding_crewai")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--bug", choices=BUGS)
    args = parser.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    flow = build_flow(args.thread, args.workdir, bug=args.bug)()
    flow.kickoff(inputs={"id": args.thread})
    state = flow.state.model_dump()
    print(json.dumps({k: state[k] for k in ("account_id", "charge_id", "welcome_sent", "active")}))
    return 0


if __name__ == "__main__":
    sys.exit(run())
