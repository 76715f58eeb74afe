"""A CrewAI Flow that asks a person twice, written as CrewAI's ``@human_feedback`` docs write one:
a decorated method's output is shown for review and the reviewer's text is read from
``self.last_human_feedback`` (no ``emit``, no provider: CrewAI asks on the console).

``python tests/agents/basic/review_crewai.py --thread T --workdir DIR [--naive]``

``propose_amount`` (feedback: the amount) -> ``charge`` (``payments.charge`` keyed by the thread)
-> ``propose_note`` (feedback: the note) -> ``file`` (``tickets.create``, keyed).  The state is
saved by ``@persist`` after each method, and every start is ``kickoff(inputs={"id": thread})``
(CrewAI runs every method again; the state says what is done).  ``--naive`` charges with no key.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from killdrill.fakes import connect


def build(thread: str, workdir: str, naive: bool) -> Any:
    from crewai.flow import Flow, human_feedback, listen, start
    from crewai.flow.flow import FlowState
    from crewai.flow.persistence import SQLiteFlowPersistence, persist

    fakes = connect()

    class Refund(FlowState):
        amount: int = 0
        charge_id: str = ""
        note: str = ""
        ticket_id: str = ""

    @persist(SQLiteFlowPersistence(db_path=os.path.join(workdir, "flows.db")))
    class RefundFlow(Flow[Refund]):
        @start()
        @human_feedback(message="Amount for order A-17?")
        def propose_amount(self) -> str:
            return "order A-17: refund amount in cents"

        @listen(propose_amount)
        def charge(self, _: Any) -> str:
            if not self.state.charge_id:
                self.state.amount = int(self.last_human_feedback.feedback)
                key = None if naive else f"{thread}:charge"
                charged = fakes.payments.charge(idempotency_key=key, order="A-17", amount=self.state.amount)
                self.state.charge_id = charged["id"]
            return self.state.charge_id

        @listen(charge)
        @human_feedback(message="Note for the ticket?")
        def propose_note(self, charge_id: str) -> str:
            return f"charged {charge_id}: the ticket's note"

        @listen(propose_note)
        def file(self, _: Any) -> str:
            if not self.state.ticket_id:
                self.state.note = self.last_human_feedback.feedback
                key = f"{thread}:ticket"
                ticket = fakes.tickets.create(idempotency_key=key, order="A-17", note=self.state.note)
                self.state.ticket_id = ticket["id"]
            return self.state.ticket_id

    return RefundFlow


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--thread", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--naive", action="store_true")
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    flow = build(args.thread, args.workdir, args.naive)()
    flow.kickoff(inputs={"id": args.thread})
    print(flow.state.model_dump_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
