"""A pydantic-ai agent made durable with DBOS (``DBOSAgent``), written as its docs show.

    python -m killdrill.examples.pydantic_ai_dbos --thread T --workdir DIR [--bug uuid_key]

Drill it with the DBOS integration (the agent imports nothing of killdrill's kill points)::

    killdrill drill --integration dbos -- \\
        python -m killdrill.examples.pydantic_ai_dbos --thread {thread} --workdir {workdir}

The agent carries pydantic-ai's ``DBOSDurability`` capability and runs inside the user's
``@DBOS.workflow`` ``bill``: every model request is a DBOS step (``billing__model.request``).
``--wrapper`` runs the same agent through the older ``DBOSAgent`` wrapper instead (deprecated in
pydantic-ai 2.6x; its workflow is ``billing_legacy.run``, its model step
``billing_legacy__model.request``).  pydantic-ai does *not* wrap function tools in steps on
DBOS (only MCP and dynamic toolsets): a tool that does I/O is decorated with ``@DBOS.step`` by the
user, as DBOS's and pydantic-ai's docs say, and is then a step like any other (``charge_card``).
The model is pydantic-ai's ``FunctionModel`` (no network): it asks for one ``charge_card`` call,
then answers with the charge id.

The correct form keys the charge by the workflow id (the thread): the same in every attempt.
``--bug uuid_key`` keys it by ``uuid4()`` inside the tool: a kill after the charge and before DBOS
recorded the step (``during:payments.charge``, ``after:charge_card``) re-runs it with a new key:
``key_changed`` + ``duplicate_effect``.

Exit 0 when the run completed (also when it had completed before).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid
import warnings
from collections.abc import Sequence

from dbos import DBOS, DBOSConfig, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSAgent, DBOSDurability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from killdrill.fakes import connect

BUGS = ("uuid_key",)
AMOUNT = 4200
_bug: str | None = None


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """One tool call, then the answer (what a model does for "charge the customer")."""
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and part.tool_name == "charge_card":
                return ModelResponse(parts=[TextPart(f"charged: {part.content}")])
    return ModelResponse(parts=[ToolCallPart("charge_card", {"customer": "acme", "amount": AMOUNT})])


@DBOS.step()
def charge_card(customer: str, amount: int) -> str:
    """Charge the customer (the tool the model calls).

    Args:
        customer: the customer id.
        amount: the amount in cents.
    """
    key = f"charge-{uuid.uuid4()}" if _bug == "uuid_key" else f"{DBOS.workflow_id}-charge"
    charge = connect().payments.charge(idempotency_key=key, amount=amount, currency="usd", customer=customer)
    return str(charge["id"])


agent = Agent(FunctionModel(_model), name="billing", tools=[charge_card], capabilities=[DBOSDurability()])


@DBOS.workflow()
async def bill(prompt: str) -> str:
    """The durable run (pydantic-ai >= 2.6x: the capability, ``agent.run()`` inside a workflow)."""
    result = await agent.run(prompt)
    return str(result.output)


def legacy_agent() -> DBOSAgent[None, str]:
    """The same agent through the wrapper of older pydantic-ai (deprecated since the capability).

    Made in ``main`` before ``DBOS.launch()``, not at import: a module run twice (preloaded by a
    fork template, then run as ``__main__``) must not register a DBOS instance twice."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DBOSAgent(Agent(FunctionModel(_model), name="billing_legacy", tools=[charge_card]))


def main(argv: Sequence[str] | None = None) -> int:
    global _bug
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--thread", required=True, help="the workflow id")
    parser.add_argument("--workdir", required=True, help="where the DBOS system database lives")
    parser.add_argument("--bug", choices=BUGS)
    parser.add_argument("--wrapper", action="store_true", help="run the deprecated DBOSAgent wrapper")
    args = parser.parse_args(argv)
    _bug = args.bug
    os.makedirs(args.workdir, exist_ok=True)
    config: DBOSConfig = {
        "name": "pydantic_ai_billing",
        "system_database_url": f"sqlite:///{os.path.join(args.workdir, 'dbos.sqlite')}",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    wrapped = legacy_agent() if args.wrapper else None
    DBOS.launch()  # recovers this thread's workflow if a killed attempt left it pending
    try:
        print(asyncio.run(_run(args.thread, wrapped)))
    finally:
        DBOS.destroy()
    return 0


async def _run(thread: str, wrapped: DBOSAgent[None, str] | None) -> str:
    # The workflow id is the thread: a resume finds the recovered run under it and waits for it.
    prompt = "Charge acme for June."
    with SetWorkflowID(thread):
        if wrapped is not None:
            return str((await wrapped.run(prompt)).output)
        return await bill(prompt)


if __name__ == "__main__":
    raise SystemExit(main())
