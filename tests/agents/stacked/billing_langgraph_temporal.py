"""A LangGraph graph made durable with Temporal's plugin (``temporalio.contrib.langgraph``), as
its docs show: each node's metadata says ``execute_in="activity"``, the plugin runs it as an
activity, the workflow compiles the graph it registered and invokes it (``billing_graph.py``).
One command is starter and worker; no sticky queue, so every workflow task replays the workflow
from its history."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import timedelta

from billing_graph import BillingGraph, builder
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.contrib.langgraph import LangGraphPlugin
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.worker import Worker

TASK_QUEUE = "billing-graph"


async def run(thread: str) -> str:
    address = os.environ.get("KILLDRILL_TEMPORAL_ADDRESS", "localhost:7233")
    namespace = os.environ.get("KILLDRILL_TEMPORAL_NAMESPACE", "default")
    client = await Client.connect(
        address, namespace=namespace, plugins=[LangGraphPlugin(graphs={"billing": builder})]
    )
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[BillingGraph], max_cached_workflows=0):
        try:
            handle = await client.start_workflow(
                BillingGraph.run,
                thread,
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
    args = parser.parse_args()
    print(asyncio.run(run(args.thread)), flush=True)
    sys.stderr.flush()
    os._exit(0)  # sdk-python#300: the SDK can abort at interpreter exit once the workflow closed


if __name__ == "__main__":
    main()
