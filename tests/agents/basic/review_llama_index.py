"""A LlamaIndex Workflow that waits for a person twice, written as the Workflows docs write human
in the loop: a step calls ``ctx.wait_for_event(HumanResponseEvent, waiter_event=
InputRequiredEvent(...))``, the driver reads the ``InputRequiredEvent`` from
``handler.stream_events()`` and answers with ``handler.ctx.send_event(HumanResponseEvent(...))``
(its person is ``input()``), and it saves ``handler.ctx.to_dict()`` at every event it sees, as the
docs persist a run; a start with a saved context resumes with ``Context.from_dict``.

``python tests/agents/basic/review_llama_index.py --thread T --workdir DIR [--naive]``

Steps ``ask_amount`` (wait), ``charge`` (``payments.charge`` keyed by the thread), ``ask_note``
(wait), ``file`` (``tickets.create``, keyed).  Both waits are for ``HumanResponseEvent``.
``--naive`` charges with no idempotency key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from workflows import Context, Workflow, step
from workflows.events import Event, HumanResponseEvent, InputRequiredEvent, StartEvent, StopEvent

from killdrill.fakes import connect


class Amount(Event):
    amount: int


class Charged(Event):
    charge_id: str


class Note(Event):
    note: str


class Progress(Event):
    step: str


class RefundFlow(Workflow):
    def __init__(self, thread: str, naive: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.thread, self.naive = thread, naive

    @step
    async def ask_amount(self, ctx: Context, ev: StartEvent) -> Amount:
        answer = await ctx.wait_for_event(
            HumanResponseEvent,
            waiter_event=InputRequiredEvent(prefix="amount for the order? "),  # type: ignore[call-arg]
        )
        return Amount(amount=int(answer.response))

    @step
    async def charge(self, ctx: Context, ev: Amount) -> Charged:
        key = None if self.naive else f"{self.thread}:charge"
        charged = connect().payments.charge(idempotency_key=key, order="A-17", amount=ev.amount)
        ctx.write_event_to_stream(Progress(step="charge"))
        return Charged(charge_id=str(charged["id"]))

    @step
    async def ask_note(self, ctx: Context, ev: Charged) -> Note:
        answer = await ctx.wait_for_event(
            HumanResponseEvent,
            waiter_event=InputRequiredEvent(prefix="note for the ticket? "),  # type: ignore[call-arg]
        )
        return Note(note=str(answer.response))

    @step
    async def file(self, ctx: Context, ev: Note) -> StopEvent:
        ticket = connect().tickets.create(idempotency_key=f"{self.thread}:ticket", order="A-17", note=ev.note)
        return StopEvent(result=str(ticket["id"]))


def save(path: str, data: dict[str, Any]) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


async def run(thread: str, workdir: str, naive: bool) -> str:
    flow = RefundFlow(thread, naive, timeout=60)
    path = os.path.join(workdir, "ctx.json")
    if os.path.exists(path):
        with open(path) as f:
            handler = flow.run(ctx=Context.from_dict(flow, json.load(f)))
    else:
        handler = flow.run()
    async for ev in handler.stream_events():
        if isinstance(ev, InputRequiredEvent):
            handler.ctx.send_event(HumanResponseEvent(response=input(ev.prefix)))  # type: ignore[call-arg]
        save(path, handler.ctx.to_dict())
    return str(await handler)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--thread", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--naive", action="store_true")
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    done = os.path.join(args.workdir, "done")
    if not os.path.exists(done):
        print(asyncio.run(run(args.thread, args.workdir, args.naive)), flush=True)
        open(done, "w").close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
