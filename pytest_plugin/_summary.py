"""pytest's short summary line for a killdrill failure: the violation, not the exception's path.

Without this, ``-rA``/``-rf`` shows ``killdrill.records.ExactlyOnceViolation: VIOLATED [...] python
-m agent ...`` cut at the terminal width, before the kinds.  The line becomes the kinds and the
first violation; the full verdict text stays in the failure section.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from killdrill.records import Verdict


def headline(result: Any) -> str:
    """``duplicate_effect, key_changed at during:payments.charge: payments.charge ... landed 2 times``."""
    kinds = ", ".join(result.kinds) or Verdict.VIOLATED
    first = result.violations[0].message.splitlines()[0] if result.violations else ""
    return f"{kinds} at {result.schedule or 'none'}" + (f": {first}" if first else "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    exc = call.excinfo.value if call.excinfo is not None else None
    if exc is None or not report.failed or type(exc).__name__ != "ExactlyOnceViolation":
        return
    if not hasattr(exc, "result"):
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        crash.message = headline(exc.result)
