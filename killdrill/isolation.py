"""What a drill's processes may inherit: nothing that leads off the machine.

A drill reaches nothing but the loopback, whatever the user's environment holds.  Every process
it starts (attempts, services, the servers the harness starts for a runtime) gets
the harness's environment less:

- the proxy variables (``HTTP_PROXY``, ``https_proxy``, ``ALL_PROXY``, ...): a corporate proxy
  would carry a call to a fake, or a model call, off the machine; every address a drill uses is
  on 127.0.0.1, so no proxy is ever needed;
- vendors' credentials and endpoints: model providers (``OPENAI_API_KEY``, ``HF_TOKEN``), payment,
  messaging, cloud and developer platforms (``STRIPE_SECRET_KEY``, ``AWS_ACCESS_KEY_ID``,
  ``TWILIO_AUTH_TOKEN``, ``GITHUB_TOKEN``), and any ``*_API_KEY`` / ``*_SECRET_KEY`` /
  ``*_ACCESS_TOKEN``: an agent under a drill talks to fakes, and a real key must never meet a
  real endpoint by mistake.

A name the user passes (``--pass-env NAME``) or sets (``--env NAME=...``) is theirs.  The
harness's own probes open URLs through :func:`open_url`, which uses no proxy, and refuse a URL
that is not loopback (:func:`loopback_error`).

Bottom layer: standard library only.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.request
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["PROXY_VARIABLES", "WITHHELD", "isolated", "loopback_error", "open_url", "withheld_names"]

PROXY_VARIABLES = frozenset(
    v
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "FTP_PROXY", "WS_PROXY", "WSS_PROXY", "GRPC_PROXY")
    for v in (name, name.lower())
)
"""Proxy settings read by curl, requests, httpx, aiohttp, urllib, gRPC and Go programs."""

MODEL_VENDORS = (
    "OPENAI", "AZURE_OPENAI", "ANTHROPIC", "CLAUDE", "GEMINI", "GOOGLE", "VERTEXAI", "MISTRAL",
    "COHERE", "CO", "GROQ", "TOGETHER", "FIREWORKS", "DEEPSEEK", "XAI", "OPENROUTER", "PERPLEXITY",
    "PPLX", "HF", "HUGGINGFACE", "HUGGINGFACEHUB", "HUGGING_FACE_HUB", "REPLICATE", "VOYAGE", "AI21",
    "CEREBRAS", "NVIDIA", "OLLAMA", "LITELLM", "LANGSMITH", "LANGCHAIN", "LANGFUSE",
)  # fmt: skip
"""Model vendors and model tracers."""

SERVICE_VENDORS = (
    "STRIPE", "PAYPAL", "ADYEN", "SQUARE", "BRAINTREE", "CHECKOUT", "GOCARDLESS", "RAZORPAY", "PLAID",
    "TWILIO", "SENDGRID", "RESEND", "POSTMARK", "MAILGUN", "MAILCHIMP", "MANDRILL", "SES", "SLACK",
    "DISCORD", "TELEGRAM", "GITHUB", "GH", "GITLAB", "JIRA", "ATLASSIAN", "LINEAR", "NOTION",
    "ZENDESK", "HUBSPOT", "SALESFORCE", "SHOPIFY", "PAGERDUTY", "SENTRY", "DATADOG", "DD",
    "AWS", "AZURE", "GCP", "GCLOUD", "CLOUDFLARE", "PINECONE", "WEAVIATE", "QDRANT", "TAVILY",
    "SERPAPI", "EXA", "FIRECRAWL", "E2B", "TEMPORAL_CLOUD",
)  # fmt: skip
"""Payment, messaging, developer and cloud platforms an agent's tools call."""

WITHHELD = re.compile(
    rf"^(?:{'|'.join(MODEL_VENDORS + SERVICE_VENDORS)})(?:_[A-Z0-9_]+)?"
    r"_(?:KEY|KEY_ID|TOKEN|SECRET|PASSWORD|DSN|ENDPOINT|BASE|URL|HOST|PROFILE|CREDENTIALS)$"
    r"|^[A-Z0-9_]+_(?:API_KEY|SECRET_KEY|ACCESS_KEY|ACCESS_TOKEN|AUTH_TOKEN|API_TOKEN)$"
    r"|^(?:GOOGLE_APPLICATION_CREDENTIALS|AWS_BEARER_TOKEN_BEDROCK|AWS_SESSION_TOKEN)$"
)
"""A vendor's credential or endpoint: not passed to a drill's processes unless ``--pass-env NAME``."""


def withheld_names(env: Mapping[str, str], passed: Collection[str] = ()) -> list[str]:
    """The names of ``env`` a drill's processes do not get (proxies and vendors' secrets)."""
    return sorted(k for k in env if (k in PROXY_VARIABLES or WITHHELD.match(k)) and k not in passed)


def isolated(env: Mapping[str, str], passed: Collection[str] = ()) -> dict[str, str]:
    """``env`` as a drill's process gets it: no proxy, no vendor's secret, but those ``passed``."""
    drop = set(withheld_names(env, passed))
    return {k: v for k, v in env.items() if k not in drop}


def is_loopback_host(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def loopback_error(url: str) -> str | None:
    """Why the harness will not open ``url`` (not an http(s) URL on this machine's loopback), or None."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return f"{url!r} is not an http:// or https:// URL"
    if not is_loopback_host(parts.hostname):
        return (
            f"{url!r} is not on this machine: a drill reaches nothing but the loopback "
            "(127.0.0.1, localhost, [::1])"
        )
    return None


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def open_url(url: str, timeout: float) -> Any:
    """``urlopen`` without the proxies of the environment (the harness's own probes of loopback URLs)."""
    return _NO_PROXY.open(url, timeout=timeout)
