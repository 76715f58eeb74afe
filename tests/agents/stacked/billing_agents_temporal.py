"""An OpenAI Agents SDK agent made durable with Temporal's plugin (``temporalio.contrib.openai_agents``),
as the plugin's README shows: the workflow runs ``Runner.run``, every model call is an activity
(``invoke_model_activity``), the charge is an activity the agent calls as a tool
(``activity_as_tool``).  One command is starter and worker (as ``killdrill.examples.payout_temporal``):
a resume attaches to the started workflow; no sticky queue, so every workflow task replays the
workflow from its history.  ``--bug uuid_key`` keys the charge by ``uuid4()``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from datetime import timedelta

from agents import Agent, Runner
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.contrib.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.contrib.openai_agents import workflow as agents_workflow
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from killdrill.fakes import connect

TASK_QUEUE = "billing-agents"
RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_interval=timedelta(seconds=1))


@activity.defn
async def charge_card(order_id: str, amount_cents: int) -> str:
    """Charge the order's card.

    Args:
        order_id: the order.
        amount_cents: the amount in cents.
    """
    bug = os.environ.get("BILLING_BUG", "")
    key = f"charge-{uuid.uuid4()}" if bug == "uuid_key" else f"{activity.info().workflow_id}-charge"
    charge = connect().payments.charge(
        idempotency_key=key, amount=amount_cents, currency="usd", customer=order_id
    )
    return f'{{"payment_intent": "{charge["id"]}"}}'


@workflow.defn
class BillingWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = Agent(
            name="billing",
            instructions="Charge the order, then say it is done.",
            tools=[
                agents_workflow.activity_as_tool(
                    charge_card, start_to_close_timeout=timedelta(seconds=2), retry_policy=RETRY
                )
            ],
        )
        result = await Runner.run(agent, prompt)
        return str(result.final_output)


async def run(thread: str) -> str:
    address = os.environ.get("KILLDRILL_TEMPORAL_ADDRESS", "localhost:7233")
    namespace = os.environ.get("KILLDRILL_TEMPORAL_NAMESPACE", "default")
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=10), retry_policy=RETRY)
    )
    client = await Client.connect(address, namespace=namespace, plugins=[plugin])
    async with Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[BillingWorkflow],
        activities=[charge_card],
        max_cached_workflows=0,  # no sticky queue: every workflow task replays the history
    ):
        try:
            handle = await client.start_workflow(
                BillingWorkflow.run,
                "Charge order A-1 for 4200 cents.",
                id=thread,
                task_queue=TASK_QUEUE,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                task_timeout=timedelta(seconds=2),
            )
        except WorkflowAlreadyStartedError:
            handle = client.get_workflow_handle(thread)  # a resume: attach to it
        return str(await handle.result())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--bug", default="")
    args = parser.parse_args()
    os.environ["BILLING_BUG"] = args.bug
    print(asyncio.run(run(args.thread)), flush=True)
    sys.stderr.flush()
    os._exit(0)  # sdk-python#300: the SDK can abort at interpreter exit once the workflow closed


if __name__ == "__main__":
    main()
