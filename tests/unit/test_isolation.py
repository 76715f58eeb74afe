"""What a drill's processes inherit: no proxy, no vendor's secret, loopback-only probes."""

from __future__ import annotations

import pytest

from killdrill.isolation import isolated, loopback_error, withheld_names

HOSTILE = {
    "HTTP_PROXY": "http://proxy:3128",
    "https_proxy": "http://proxy:3128",
    "ALL_PROXY": "socks5://proxy:1080",
    "GRPC_PROXY": "http://proxy:3128",
    "OPENAI_API_KEY": "sk-real",
    "HF_TOKEN": "hf_real",
    "STRIPE_SECRET_KEY": "sk_live_real",
    "STRIPE_API_KEY": "sk_live_real",
    "AWS_ACCESS_KEY_ID": "AKIA",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "AWS_SESSION_TOKEN": "token",
    "TWILIO_AUTH_TOKEN": "t",
    "GITHUB_TOKEN": "ghp",
    "SENTRY_DSN": "https://x@sentry.io/1",
    "MYVENDOR_API_KEY": "k",
    "ACME_ACCESS_TOKEN": "k",
}
KEPT = {
    "PATH": "/usr/bin",
    "HOME": "/root",
    "DATABASE_URL": "postgresql://127.0.0.1/app",
    "PGPASSWORD": "pw",
    "REDIS_URL": "redis://127.0.0.1",
    "AWS_REGION": "eu-west-1",
    "NO_PROXY": "localhost",
    "GITHUB_ACTIONS": "true",
    "LANGCHAIN_TRACING_V2": "false",
    "SECRET_OF_MY_APP": "mine",
}


def test_proxies_and_vendor_secrets_are_withheld_the_rest_kept() -> None:
    assert isolated({**HOSTILE, **KEPT}) == KEPT
    assert withheld_names({**HOSTILE, **KEPT}) == sorted(HOSTILE)


def test_a_passed_name_is_the_users() -> None:
    got = isolated({**HOSTILE, **KEPT}, passed=("HTTPS_PROXY", "https_proxy", "STRIPE_SECRET_KEY"))
    assert got == {**KEPT, "https_proxy": HOSTILE["https_proxy"], "STRIPE_SECRET_KEY": "sk_live_real"}


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:{port}/health", "http://localhost:8000/", "https://[::1]:8443/", "http://127.0.0.2/"]
)
def test_loopback_urls_are_probed(url: str) -> None:
    assert loopback_error(url) is None


@pytest.mark.parametrize(
    "url", ["http://example.com/", "http://10.0.0.1:8000/", "http://0.0.0.0:80/", "http:///x", "ftp://127.0.0.1/"]
)
def test_other_urls_are_refused_in_one_line(url: str) -> None:
    why = loopback_error(url)
    assert why is not None and "\n" not in why and repr(url) in why
