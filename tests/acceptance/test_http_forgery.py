"""Charges forged over HTTP by another local user, during a real drill of a correct agent.

The fakes' guard itself (secret path, bounds, quiet 4xx) is tests/unit/fakes/test_httpguard.py;
this runs the whole drill in a private network namespace with a forger of another uid.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HOSTILE = Path(__file__).parents[1] / "agents" / "hostile"


def _other_user_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to run a client as another user (setpriv --reuid=65534)"
    for tool in ("setpriv", "unshare", "ip"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0:
        return "cannot create a private network namespace (unshare --net)"
    return None


def test_forged_charges_from_another_user_cannot_fail_a_correct_agent(tmp_path: Path) -> None:
    """Before: the forged POSTs landed as 48 charges in the case's ledger and a correct agent failed."""
    pytest.importorskip("stripe")
    why = _other_user_unavailable()
    if why:
        pytest.skip(why)
    proc = subprocess.run(
        ["unshare", "--net", sys.executable, str(HOSTILE / "forged_http_drill.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["ok"] == [True, True], result["texts"]
    assert result["charges"] == [["created", "replayed"], ["created", "replayed"]]
    statuses = {line.split()[1] for line in result["forger"]}
    assert "404" in statuses, result["forger"]  # it did reach the fakes
    assert not statuses & {"200", "201", "400", "409", "500"}, result["forger"]
    assert "Traceback" not in proc.stderr
