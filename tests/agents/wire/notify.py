"""An agent that tells a Slack channel an order was paid, with slack_sdk as apps use it: the
client's base URL from its configuration (``SLACK_API_URL``), nothing of killdrill imported.

Correct form: the post is gated. The agent claims it in its state file before posting and, when
it finds a claim without a posted ``ts`` (a kill took the answer), it looks the message up in the
channel's history by the order in its metadata before posting again.  ``--bug ungated`` posts
whenever its state has no ``ts``: a kill after Slack posted is a second message.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from slack_sdk import WebClient

p = argparse.ArgumentParser()
p.add_argument("--order", required=True)
p.add_argument("--state", required=True)
p.add_argument("--bug", default="")
args = p.parse_args()

state_file = Path(args.state)
state: dict[str, Any] = json.loads(state_file.read_text()) if state_file.exists() else {}


def save() -> None:
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, state_file)


client = WebClient(token="xoxb-agent", base_url=os.environ["SLACK_API_URL"])
channel = "C0ORDERS"
if "ts" not in state and state.get("claimed") and args.bug != "ungated":
    history = client.conversations_history(channel=channel, include_all_metadata=True)
    for message in history["messages"]:
        if (message.get("metadata") or {}).get("event_payload", {}).get("order") == args.order:
            state["ts"] = message["ts"]  # it was posted: the kill took only the answer
            save()
if "ts" not in state:
    state["claimed"] = True
    save()
    posted = client.chat_postMessage(
        channel=channel,
        text=f"Order {args.order} is paid",
        metadata={"event_type": "order_paid", "event_payload": {"order": args.order}},
    )
    state["ts"] = posted["ts"]
    save()
