"""A pydantic-ai agent made durable with Temporal (``TemporalDurability``), as its docs show.

``python -m killdrill.examples.pydantic_ai_temporal --thread T [--bug uuid_key] [--wrapper]``

Drill it with the Temporal integration (the harness runs the dev server)::

    killdrill drill --integration temporal -- \\
        python -m killdrill.examples.pydantic_ai_temporal --thread {thread}

The agent carries pydantic-ai's ``TemporalDurability`` capability; the workflow
``BillingWorkflow`` calls ``agent.run()``; the worker gets pydantic-ai's activities from
``PydanticAIPlugin`` + ``AgentPlugin``.  pydantic-ai runs every model request as an activity
(``agent__billing__model_request``) and the calls of a function toolset as one activity type per
toolset (``agent__billing__toolset__<agent>__call_tool``); the integration names that activity's
points after the tool it calls (``before:charge_card`` ...).
``--wrapper`` runs the same agent through the older ``TemporalAgent`` wrapper (deprecated in
pydantic-ai 2.6x) instead.  The model is pydantic-ai's ``FunctionModel`` (no network): one
``charge_card`` call, then the answer.

As ``killdrill.examples.payout_temporal``: one command is starter and worker, a resume attaches to
the started workflow, the activities have short timeouts (start-to-close 2 s, first retry after
100 ms), no sticky queue, a 2 s workflow task timeout, and ``os._exit`` at the end
(sdk-python#300).

The correct form keys the charge by the workflow id (``activity.info().workflow_id``: the tool
runs inside pydantic-ai's activity).  ``--bug uuid_key`` keys it by ``uuid4()``: a worker killed
after the charge and before the activity's completion reached the server charges again on the
retry: ``key_changed`` + ``duplicate_effect``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
import warnings
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import (
    AgentPlugin,
    PydanticAIPlugin,
    TemporalAgent,
    TemporalDurability,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.worker import Worker
from temporalio.workflow import ActivityConfig

with workflow.unsafe.imports_passed_through():
    from killdrill.fakes import connect

TASK_QUEUE = "pydantic-ai-billing"
BUGS = ("uuid_key",)
AMOUNT = 4200
PROMPT = "Charge acme for June."
# Drill settings (README, Temporal): a killed activity is retried after 2 s, the retry at once.
ACTIVITIES = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=2),
    retry_policy=RetryPolicy(
        initial_interval=timedelta(milliseconds=100), maximum_interval=timedelta(seconds=1)
    ),
)


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """One tool call, then the answer (what a model does for "charge the customer")."""
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and part.tool_name == "charge_card":
                return ModelResponse(parts=[TextPart(f"charged: {part.content}")])
    return ModelResponse(parts=[ToolCallPart("charge_card", {"customer": "acme", "amount": AMOUNT})])


def charge_card(customer: str, amount: int) -> str:
    """Charge the customer (the tool the model calls).

    Args:
        customer: the customer id.
        amount: the amount in cents.
    """
    info = activity.info()  # the tool runs inside pydantic-ai's call_tool activity
    bug = os.environ.get("PYDANTIC_AI_EXAMPLE_BUG", "")
    key = f"charge-{uuid.uuid4()}" if bug == "uuid_key" else f"{info.workflow_id}-charge"
    charge = connect().payments.charge(idempotency_key=key, amount=amount, currency="usd", customer=customer)
    return str(charge["id"])


agent = Agent(
    FunctionModel(_model),
    name="billing",
    tools=[charge_card],
    capabilities=[TemporalDurability(activity_config=ACTIVITIES)],
)

with warnings.catch_warnings():  # the wrapper of older pydantic-ai, deprecated since the capability
    warnings.simplefilter("ignore")
    legacy_agent = TemporalAgent(
        Agent(FunctionModel(_model), name="billing_legacy", tools=[charge_card]),
        activity_config=ACTIVITIES,
    )


@workflow.defn
class BillingWorkflow:
    __pydantic_ai_agents__ = (agent,)

    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await agent.run(prompt)
        return str(result.output)


@workflow.defn
class LegacyBillingWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await legacy_agent.run(prompt)
        return str(result.output)


async def run(thread: str, wrapper: bool) -> str:
    address = os.environ.get("KILLDRILL_TEMPORAL_ADDRESS", "localhost:7233")
    namespace = os.environ.get("KILLDRILL_TEMPORAL_NAMESPACE", "default")
    client = await Client.connect(address, namespace=namespace, plugins=[PydanticAIPlugin()])
    flow: Any = LegacyBillingWorkflow if wrapper else BillingWorkflow
    async with Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[flow],
        plugins=[AgentPlugin(legacy_agent if wrapper else agent)],
        max_cached_workflows=0,  # no sticky queue: a resumed worker gets the workflow task at once
    ):
        handle: WorkflowHandle[Any, Any]
        try:
            handle = await client.start_workflow(
                flow.run,
                PROMPT,
                id=thread,
                task_queue=TASK_QUEUE,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                task_timeout=timedelta(seconds=2),  # a workflow task sent to a killed worker
            )
        except WorkflowAlreadyStartedError:
            handle = client.get_workflow_handle(thread)  # a resume: attach to it
        return str(await handle.result())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.pydantic_ai_temporal")
    parser.add_argument("--thread", required=True, help="the workflow id")
    parser.add_argument("--bug", choices=BUGS, default="", help="plant a common mistake")
    parser.add_argument("--wrapper", action="store_true", help="run the deprecated TemporalAgent wrapper")
    args = parser.parse_args(argv)
    os.environ["PYDANTIC_AI_EXAMPLE_BUG"] = args.bug  # read by the tool, in the activity
    print(json.dumps(asyncio.run(run(args.thread, args.wrapper))), flush=True)
    sys.stderr.flush()
    os._exit(0)  # sdk-python#300: the SDK can abort at interpreter exit once the workflow closed


if __name__ == "__main__":
    main()
