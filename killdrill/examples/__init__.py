"""Bundled example agents: correct forms, and planted defects behind flags.

``SETTLEMENT`` is the drill command of the five-node settlement agent, as in the README
(``python`` there means the interpreter running killdrill).

Not layered: these are agents, users' code; they import the public API (``killdrill``,
``killdrill.fakes``, ``killdrill.effects``) like any agent.
"""

import os

SETTLEMENT = (
    "python",
    "-m",
    "killdrill.examples.settlement",
    "--thread",
    "{thread}",
    "--db",
    "{workdir}/ckpt.sqlite",
)

ORDER_AGENT = (
    "python",
    "-m",
    "killdrill.examples.order_agent",
    "--thread",
    "{thread}",
    "--db",
    "{workdir}/ckpt.sqlite",
)
"""The LangGraph order agent (``ChatOpenAI`` + ``ToolNode``; stripe, httpx, smtplib): drill it with
``--langgraph --smtp-fake --model-script ORDER_AGENT_SCRIPT`` and ``ORDER_AGENT_ENV``."""

ORDER_AGENT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "order_agent.yaml")
"""The scripted model the order agent talks to (``--model-script``)."""

ORDER_AGENT_ENV = {
    "STRIPE_API_BASE": "{KILLDRILL_FAKES_URL}",
    "ORDER_WEBHOOK_URL": "{KILLDRILL_FAKES_URL}/hooks/orders",
    "SMTP_HOST": "{KILLDRILL_SMTP}",
    "MAIL_LOOKUP_URL": "{KILLDRILL_FAKES_URL}/fakes/mailbox/lookup",
}
"""How the order agent's own settings point at the fakes (``--env NAME=VALUE``, filled per attempt)."""

ORDER_AGENT_PRELOAD = (
    "langchain_openai",
    "langgraph.prebuilt",
    "langgraph.checkpoint.sqlite",
    "stripe",
    "httpx",
)
"""Modules the fork template imports once for the order agent (``--launcher fork --preload ...``)."""

BILLING_OPENAI_AGENTS = (
    "python",
    "-m",
    "killdrill.examples.billing_openai_agents",
    "--thread",
    "{thread}",
    "--db",
    "{workdir}/session.sqlite",
)
"""The OpenAI Agents SDK billing agent (``Agent`` + ``@function_tool``, ``SQLiteSession``,
``Runner.run`` on the Responses API; stripe, smtplib): drill it with ``--integration openai_agents
--smtp-fake --model-script BILLING_OPENAI_AGENTS_SCRIPT`` and ``BILLING_OPENAI_AGENTS_ENV``."""

BILLING_OPENAI_AGENTS_SCRIPT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "billing_openai_agents.yaml"
)
"""The scripted model the billing agent talks to (``--model-script``)."""

BILLING_OPENAI_AGENTS_ENV = {
    "STRIPE_API_BASE": "{KILLDRILL_FAKES_URL}",
    "SMTP_HOST": "{KILLDRILL_SMTP}",
    "MAIL_LOOKUP_URL": "{KILLDRILL_FAKES_URL}/fakes/mailbox/lookup",
}
"""How the billing agent's own settings point at the fakes (``--env NAME=VALUE``)."""

BILLING_OPENAI_AGENTS_PRELOAD = ("agents", "stripe", "httpx")
"""Modules the fork template imports once for the billing agent (``--preload``)."""

HOTEL_REVIEW = (
    "python",
    "-m",
    "killdrill.examples.hotel_review_langgraph",
    "--thread",
    "{thread}",
    "--db",
    "{workdir}/ckpt.sqlite",
)
"""LangGraph's review-tool-calls example (``interrupt()`` before the booking): drill it with
``--integration langgraph --model-script HOTEL_REVIEW_SCRIPT --answer '{"action": "continue"}'``."""

HOTEL_REVIEW_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hotel_review_langgraph.yaml")
"""The scripted model the hotel-review agent talks to (``--model-script``)."""
