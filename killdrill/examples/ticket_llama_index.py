"""A LlamaIndex Workflow as users write it: ``@step`` methods, ``Context.to_dict()`` saved to a file.

    python -m killdrill.examples.ticket_llama_index --thread T --workdir DIR [--bug save_before_effect]

Steps, in order: ``open_ticket`` -> ``charge`` -> ``notify``.  The basic runtime persists
nothing, so the program does what the documentation shows: it streams the run's events and,
on every ``Progress`` event a step writes, saves ``handler.ctx.to_dict()`` to
``DIR/ticket-T.json`` (atomically); on start it restores ``Context.from_dict`` from that file and
runs the workflow on the restored context.  A finished run leaves ``DIR/ticket-T.done``.

The correct form writes a step's ``Progress`` event after the step's effect returned, and makes
each effect safe to repeat (a snapshot may hold the step as still running, and a kill before the
next save re-runs it): the ticket and the charge carry keys derived from the thread; the
email carries ``ref`` and is looked up before it is sent.

``--bug save_before_effect``: ``charge`` and ``notify`` record themselves done in the context's
store and write their ``Progress`` event *before* the effect, then yield so the runner saves;
a re-run step that finds itself done skips the effect.  A kill after that save and before the
effect (``committed:checkpoint`` of that save) resumes past an effect that never happened:
``missing_effect``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from workflows import Context, Workflow, step
from workflows.events import Event, StartEvent, StopEvent

from killdrill.fakes import connect

BUGS = ("save_before_effect",)


class Progress(Event):
    """Written by a step to the event stream: the runner saves the context when it sees one."""

    step: str


class Opened(Event):
    ticket_id: str


class Charged(Event):
    charge_id: str


class TicketWorkflow(Workflow):
    """Events live at module level: ``Context.from_dict`` finds their classes by qualified name."""

    def __init__(self, thread: str, *, bug: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.thread = thread
        self.early = bug == "save_before_effect"
        self.fakes = connect()

    @step
    async def open_ticket(self, ctx: Context, ev: StartEvent) -> Opened:
        ticket = self.fakes.tickets.create(
            idempotency_key=f"{self.thread}:open_ticket", customer=ev.customer, subject="Refund request"
        )
        await ctx.store.set("ticket_id", ticket["id"])
        ctx.write_event_to_stream(Progress(step="open_ticket"))
        return Opened(ticket_id=ticket["id"])

    @step
    async def charge(self, ctx: Context, ev: Opened) -> Charged:
        if self.early:
            if await ctx.store.get("charged", default=False):
                return Charged(charge_id=await ctx.store.get("charge_id", default=""))
            await ctx.store.set("charged", True)
            ctx.write_event_to_stream(Progress(step="charge"))
            await asyncio.sleep(0.05)  # let the runner save before the slow call
        charge = self.fakes.payments.charge(
            idempotency_key=f"{self.thread}:charge", ticket=ev.ticket_id, amount=1500, currency="usd"
        )
        await ctx.store.set("charge_id", charge["id"])
        if not self.early:
            ctx.write_event_to_stream(Progress(step="charge"))
        return Charged(charge_id=charge["id"])

    @step
    async def notify(self, ctx: Context, ev: Charged) -> StopEvent:
        ref = f"{self.thread}:notify"
        if self.early:
            if await ctx.store.get("notified", default=False):
                return StopEvent(result=ref)
            await ctx.store.set("notified", True)
            ctx.write_event_to_stream(Progress(step="notify"))
            await asyncio.sleep(0.05)
        elif self.fakes.mailbox.lookup(ref) is not None:
            return StopEvent(result=ref)
        self.fakes.mailbox.send(
            to="customer@example.com",
            subject="Your refund ticket",
            body=f"Charge {ev.charge_id} recorded.",
            ref=ref,
        )
        if not self.early:
            ctx.write_event_to_stream(Progress(step="notify"))
        return StopEvent(result=ref)


def _save(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


async def main(thread: str, workdir: str, bug: str | None) -> str:
    workflow = TicketWorkflow(thread, bug=bug, timeout=60)
    path = os.path.join(workdir, f"ticket-{thread}.json")
    if os.path.exists(path):
        with open(path) as f:
            ctx = Context.from_dict(workflow, json.load(f))
        handler = workflow.run(ctx=ctx)
    else:
        handler = workflow.run(customer="cus_1")
    async for ev in handler.stream_events():
        if isinstance(ev, Progress):
            _save(path, handler.ctx.to_dict())
    return str(await handler)


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.ticket_llama_index")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--bug", choices=BUGS)
    args = parser.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    done = os.path.join(args.workdir, f"ticket-{args.thread}.done")
    if os.path.exists(done):
        print("already done")
        return 0
    result = asyncio.run(main(args.thread, args.workdir, args.bug))
    open(done, "w").close()
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(run())
