"""The CrewAI Flows probe: ``reserve -> charge -> notify`` as ``@start``/``@listen`` methods.

    python -m killdrill.conform.probes.crewai_probe --thread T --workdir DIR

Written as CrewAI's docs say to persist a flow: ``@persist`` with ``SQLiteFlowPersistence`` (the
integration's ``committed:METHOD``), every start ``kickoff(inputs={"id": T})`` (the documented way
to continue a persisted flow's state), keys from the flow state's ``id``.  No done-flags: the probe
trusts the framework to resume where it stopped, which is what the property asks of it.  No
interrupt form yet.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from killdrill.conform.probes._common import parse
from killdrill.fakes import connect


def build(workdir: str) -> Any:
    from crewai.flow.flow import Flow, FlowState, listen, start
    from crewai.flow.persistence import SQLiteFlowPersistence, persist

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
    build(args.workdir)().kickoff(inputs={"id": args.thread})
    return 0


if __name__ == "__main__":
    sys.exit(main())
