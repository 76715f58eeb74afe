"""Which framework a test needs, and whether its absence is a skip or a failure.

Each framework's tests skip, with the extra that installs it, where it is missing. CI names the
extras it installed in ``KILLDRILL_REQUIRE_FRAMEWORKS`` (comma-separated), and there a missing
one fails instead: CI must drill every framework it claims to (CrewAI in a venv of its own,
since it pins ``openai<3``).
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from killdrill.errors import install_hint

REQUIRE_ENV = "KILLDRILL_REQUIRE_FRAMEWORKS"


def need(extra: str, *modules: str) -> None:
    """Skip this test module unless every one of ``modules`` imports (fail where CI requires it)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    why = f"needs {', '.join(missing)}: {install_hint(extra)}"
    required = {_normal(name) for name in os.environ.get(REQUIRE_ENV, "").split(",")}
    if _normal(extra) in required:
        pytest.fail(f"{why} ({REQUIRE_ENV} requires it)", pytrace=False)
    pytest.skip(why, allow_module_level=True)


def _normal(extra: str) -> str:
    """An extra's name as pip compares it (``llama_index`` and ``llama-index`` are one extra)."""
    return extra.strip().lower().replace("_", "-")
