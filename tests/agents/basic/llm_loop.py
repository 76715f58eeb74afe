"""A plain tool-calling loop over the real OpenAI or Anthropic SDK, checkpointed in a JSON file.

The model decides the charge (``charge_card`` with order and amount); the loop runs the tool,
appends the result and asks again until the model stops calling tools.  The transcript is
saved after each model reply and each tool result (``--checkpoint turn``: only after the
tools ran, so a kill in a tool asks the model again), so a resume continues the conversation.
``--key tool-call`` keys the charge on the model's tool-call id (a mistake: the model answers a
resumed attempt with a new id); the default keys it on the thread and the order.
"""

import argparse
import json
import os

from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
p.add_argument("--ckpt", required=True)
p.add_argument("--api", choices=["openai", "anthropic"], default="openai")
p.add_argument("--key", choices=["business", "tool-call"], default="business")
p.add_argument(
    "--checkpoint", choices=["message", "turn"], default="message", help="turn: save after the tools"
)
p.add_argument("--env-out", help="write the model variables this process sees to this JSON file")
args = p.parse_args()
if args.env_out:
    seen = (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "HF_TOKEN",
        "OPENAI_BASE_URL",
        "OPENAI_AGENTS_DISABLE_TRACING",
    )
    with open(args.env_out, "w") as f:
        json.dump({name: os.environ.get(name) for name in seen}, f)

TOOLS = [{"name": "charge_card", "description": "Charge a card", "parameters": {"type": "object"}}]
messages = [{"role": "user", "content": "Settle order A-17 for 4200 cents."}]
if os.path.exists(args.ckpt):
    with open(args.ckpt) as f:
        messages = json.load(f)


def save() -> None:
    with open(args.ckpt + ".tmp", "w") as f:
        json.dump(messages, f)
    os.replace(args.ckpt + ".tmp", args.ckpt)


def charge(call_id: str, arguments: dict) -> str:
    key = call_id if args.key == "tool-call" else f"{args.thread}:charge:{arguments['order_id']}"
    result = connect().payments.charge(
        idempotency_key=key, amount=arguments["amount_cents"], order=arguments["order_id"]
    )
    return f"charged {result['id']}"


if args.api == "openai":
    import openai

    client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    tools = [{"type": "function", "function": t} for t in TOOLS]
    while True:
        if messages[-1]["role"] != "assistant":
            reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
            messages.append(reply.choices[0].message.model_dump(exclude_none=True))
            if args.checkpoint == "message":
                save()
        calls = messages[-1].get("tool_calls") or []
        if not calls:
            break
        for call in calls:
            out = charge(call["id"], json.loads(call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": out})
        save()
else:
    import anthropic

    client = anthropic.Anthropic()  # ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY from the environment
    tools = [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in TOOLS
    ]
    while True:
        if messages[-1]["role"] != "assistant":
            reply = client.messages.create(model="claude-x", max_tokens=512, messages=messages, tools=tools)
            messages.append(
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}
            )
            if args.checkpoint == "message":
                save()
        uses = [b for b in messages[-1]["content"] if b["type"] == "tool_use"]
        if not uses:
            break
        results = [
            {"type": "tool_result", "tool_use_id": b["id"], "content": charge(b["id"], b["input"])}
            for b in uses
        ]
        messages.append({"role": "user", "content": results})
        save()
print(json.dumps(messages[-1]))
