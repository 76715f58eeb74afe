"""The CrewAI Flows probe: ``reserve -> charge -> notify`` as ``@start``/``@listen`` methods.

    python -m killdrill.conform.probes.crewai_probe --thread T --workdir DIR

Written as CrewAI's docs say to persist a flow: ``@persist`` with ``SQLiteFlowPersistence`` (the
integration's ``committed:METHOD``), every start ``kickoff(inputs={"id": T})`` (the documented way
to continue a persisted flow's state), keys from the flow state's ``id``.  No done-flags: the probe
trusts the framework to resume where it stopped, which is what the property asks of it.
``--interrupt``: after ``charge`` a ``review`` method asks a human (``@human_feedback`` with a
provider that raises ``HumanFeedbackPending``: the documented asynchronous form, CrewAI saves the
pending feedback), and its listener ``send_notice`` sends an email (``mailbox.send``); a process
that finds the flow's pending feedback restores it (``Flow.from_pending``) and delivers the
approval (``flow.resume("approved")``), the point ``before:deliver`` marking the start of a
delivery, as an approval webhook would.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import killdrill
from killdrill.conform.probes._common import parse
from killdrill.fakes import connect


def build(workdir: str, interrupt: bool = False) -> Any:
    from crewai.flow.async_feedback import HumanFeedbackPending
    from crewai.flow.flow import Flow, FlowState, listen, start
    from crewai.flow.human_feedback import human_feedback
    from crewai.flow.persistence import SQLiteFlowPersistence, persist

    class Webhook:
        """The approval arrives later, by webhook: pause the flow (CrewAI saves what is pending)."""

        def request_feedback(self, context: Any, flow: Any) -> str:
            raise HumanFeedbackPending(context=context)

    fakes = connect()

    class Probe(FlowState):
        customer: str = "acme"
        hold: str = ""
        charge_id: str = ""
        notice: str = ""

    @persist(SQLiteFlowPersistence(db_path=os.path.join(workdir, "flows.db")))
    class ProbeFlow(Flow[Probe]):
        @start()
        def reserve(self) -> str:
            fakes.kv.set(f"hold/{self.state.id}", {"customer": self.state.customer, "amount": 4200})
            self.state.hold = f"hold/{self.state.id}"
            return self.state.hold

        @listen(reserve)
        def charge(self, hold: str) -> str:
            c = fakes.payments.charge(
                idempotency_key=f"{self.state.id}:charge",
                amount=4200,
                currency="usd",
                customer=self.state.customer,
            )
            self.state.charge_id = c["id"]
            return self.state.charge_id

        if interrupt:

            @listen(charge)
            @human_feedback(message="Send the notice for this charge?", provider=Webhook())
            def review(self, charge_id: str) -> str:
                return charge_id

            @listen(review)
            def send_notice(self, result: Any) -> str:
                feedback = getattr(result, "feedback", result)
                sent = fakes.mailbox.send(
                    to="billing@acme.example", subject="Charged", body=f"{feedback}: {self.state.charge_id}"
                )
                self.state.notice = sent["id"]
                return self.state.notice

        else:

            @listen(charge)
            def notify(self, charge_id: str) -> str:
                posted = fakes.webhooks.post(
                    idempotency_key=f"{self.state.id}:notify", event="charged", charge=charge_id
                )
                self.state.notice = posted["id"]
                return self.state.notice

    return ProbeFlow


def main(argv: Sequence[str] | None = None) -> int:
    args = parse("crewai_probe", argv)
    flow_cls = build(args.workdir, args.interrupt)
    if not args.interrupt:
        flow_cls().kickoff(inputs={"id": args.thread})
        return 0
    from crewai.flow.persistence import SQLiteFlowPersistence

    done = os.path.join(args.workdir, "done")
    if os.path.exists(done):
        return 0
    persistence = SQLiteFlowPersistence(db_path=os.path.join(args.workdir, "flows.db"))
    if persistence.load_pending_feedback(args.thread) is None:
        flow_cls().kickoff(inputs={"id": args.thread})  # runs until the human is asked
    if persistence.load_pending_feedback(args.thread) is not None:
        killdrill.boundary("before:deliver")
        flow = flow_cls.from_pending(args.thread, persistence)
        flow.resume(args.approval)
    open(done, "w").close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
