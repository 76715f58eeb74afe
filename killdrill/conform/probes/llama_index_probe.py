"""The LlamaIndex Workflows probe: ``reserve -> charge -> notify`` as ``@step``s of a ``Workflow``.

    python -m killdrill.conform.probes.llama_index_probe --thread T --workdir DIR [--interrupt]

Written as the Workflows docs say to persist a run: each step writes a progress event to the
stream and the runner saves ``handler.ctx.to_dict()`` when it sees one (the integration's
``committed:checkpoint``); a start with a saved context resumes with ``Context.from_dict`` and
``workflow.run(ctx=ctx)``.  Keys from the run's id (the thread) and the step.  ``--interrupt``:
``notify`` waits for a human (``ctx.wait_for_event(HumanResponseEvent, waiter_event=
InputRequiredEvent(...))``); the runner saves the context when asked and stops; a process that finds
a saved context waiting for the human delivers ``HumanResponseEvent(response=--approval)`` (the
point ``before:deliver``), and the approved notice is an email (``mailbox.send``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from workflows import Context, Workflow, step
from workflows.events import Event, HumanResponseEvent, InputRequiredEvent, StartEvent, StopEvent

import killdrill
from killdrill.conform.probes._common import parse
from killdrill.fakes import connect


class ProbeProgress(Event):
    step: str


class Reserved(Event):
    hold: str


class ProbeCharged(Event):
    charge_id: str


class LlamaProbeWorkflow(Workflow):
    def __init__(self, thread: str, interrupt: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.thread = thread
        self.interrupt = interrupt
        self.fakes = connect()

    @step
    async def reserve(self, ctx: Context, ev: StartEvent) -> Reserved:
        self.fakes.kv.set(f"hold/{self.thread}", {"customer": "acme", "amount": 4200})
        ctx.write_event_to_stream(ProbeProgress(step="reserve"))
        return Reserved(hold=f"hold/{self.thread}")

    @step
    async def charge(self, ctx: Context, ev: Reserved) -> ProbeCharged:
        c = self.fakes.payments.charge(
            idempotency_key=f"{self.thread}:charge", amount=4200, currency="usd", customer="acme"
        )
        ctx.write_event_to_stream(ProbeProgress(step="charge"))
        return ProbeCharged(charge_id=c["id"])

    @step
    async def notify(self, ctx: Context, ev: ProbeCharged) -> StopEvent:
        if self.interrupt:
            answer = await ctx.wait_for_event(
                HumanResponseEvent,
                waiter_event=InputRequiredEvent(prefix=f"send the notice for {ev.charge_id}?"),  # type: ignore[call-arg]
            )
            sent = self.fakes.mailbox.send(
                to="billing@acme.example", subject="Charged", body=f"{answer.response}: {ev.charge_id}"
            )
            return StopEvent(result=sent["id"])
        posted = self.fakes.webhooks.post(
            idempotency_key=f"{self.thread}:notify", event="charged", charge=ev.charge_id
        )
        ctx.write_event_to_stream(ProbeProgress(step="notify"))
        return StopEvent(result=posted["id"])


def _save(path: str, data: dict[str, Any]) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


async def run(thread: str, workdir: str, interrupt: bool, approval: str) -> str:
    wf = LlamaProbeWorkflow(thread, interrupt, timeout=60)
    path = os.path.join(workdir, "ctx.json")
    waiting = os.path.join(workdir, "waiting")
    if os.path.exists(path):
        with open(path) as f:
            ctx = Context.from_dict(wf, json.load(f))
        handler = wf.run(ctx=ctx)
    else:
        handler = wf.run()
    if interrupt and os.path.exists(waiting):
        killdrill.boundary("before:deliver")
        handler.ctx.send_event(HumanResponseEvent(response=approval))  # type: ignore[call-arg]
    async for ev in handler.stream_events():
        if isinstance(ev, ProbeProgress):
            _save(path, handler.ctx.to_dict())
        elif isinstance(ev, InputRequiredEvent) and not os.path.exists(waiting):
            _save(path, handler.ctx.to_dict())  # parked: the run waits for a human
            open(waiting, "w").close()
            await handler.cancel_run()
            return "waiting"
    return str(await handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse("llama_index_probe", argv)
    done = os.path.join(args.workdir, "done")
    if os.path.exists(done):
        return 0
    result = asyncio.run(run(args.thread, args.workdir, args.interrupt, args.approval))
    if result == "waiting":  # the human answers later: deliver it now, as the approval webhook would
        result = asyncio.run(run(args.thread, args.workdir, args.interrupt, args.approval))
    open(done, "w").close()
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
