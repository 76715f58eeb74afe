"""A deployment whose clean run fails says which process failed and shows that process's stderr:
a service that crashed while the driver ran, a service that exits at once, a readiness probe on
a port the service does not listen on (one line naming both ports, not a wait of the whole
timeout), a service that exits before it is ready."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.cli_support import run_cli
from tests.leftovers import survivors

# A service answering POSTs: its handler raises (http.server prints the traceback and drops the
# connection, as a web server logs a crashed request), and the process stays up.
CRASHING = """\
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        raise RuntimeError("refunds table is missing: run the migrations")

HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""
# A client that exits 1 without a word on stderr (it prints on stdout), as many scripts do.
CLIENT = """\
import sys, urllib.request
try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=b"{}"), timeout=10)
except Exception as exc:
    print("refund failed:", type(exc).__name__)
    sys.exit(1)
"""
WAITS = "import time\ntime.sleep(20)\n"


def drill(tmp_path: Path, *args: str) -> tuple[int, str, float]:
    began = time.monotonic()
    out = run_cli(tmp_path, "run", "--schedule", "api:before:x", "--discovery-runs", "1",
                  "--root", str(tmp_path / "w"), *args)  # fmt: skip
    took = time.monotonic() - began
    assert not survivors(str(tmp_path / "w"), seconds=0.3), "a process of the case survived it"
    return out.returncode, out.stdout + out.stderr, took


def test_a_service_that_crashed_a_request_in_the_clean_run_is_named_with_its_traceback(
    tmp_path: Path,
) -> None:
    (tmp_path / "svc.py").write_text(CRASHING)
    (tmp_path / "client.py").write_text(CLIENT)
    rc, text, _ = drill(
        tmp_path, "--serve", f"api=python {tmp_path / 'svc.py'} {{port}}",
        "--", "python", str(tmp_path / "client.py"), "http://127.0.0.1:{port}/refunds",
    )  # fmt: skip
    assert rc == 2, text
    assert "(no stderr)" not in text, text
    assert "service api" in text and "RuntimeError: refunds table is missing: run the migrations" in text, (
        text
    )


def test_a_service_that_exits_at_once_is_named_not_the_driver(tmp_path: Path) -> None:
    (tmp_path / "svc.py").write_text("import sys\nsys.exit('DATABASE_URL is not set')\n")
    (tmp_path / "driver.py").write_text(WAITS)
    rc, text, _ = drill(tmp_path, "--serve", f"api=python {tmp_path / 'svc.py'}", "--", "python",
                        str(tmp_path / "driver.py"))  # fmt: skip
    assert rc == 2, text
    assert "exited -15" not in text, text
    assert "service api exited 1" in text and "DATABASE_URL is not set" in text, text


def test_a_probe_on_a_port_the_service_does_not_listen_on_fails_fast_naming_both(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        probed = s.getsockname()[1]  # the port the user's probe names (free once closed)
    (tmp_path / "svc.py").write_text(CRASHING)
    (tmp_path / "driver.py").write_text(WAITS)
    rc, text, took = drill(
        tmp_path, "--serve", f"api=python {tmp_path / 'svc.py'} {{port}}", "--ready", f"api=tcp:{probed}",
        "--", "python", str(tmp_path / "driver.py"),
    )  # fmt: skip
    assert rc == 2, text
    line = text.strip().splitlines()[-1]
    assert "service api listens on port" in line and f"not on the probed port {probed}" in line, text
    assert took < 30, f"took {took:.1f}s: the probe waited out its timeout"


def test_a_service_that_exits_before_it_is_ready_fails_at_once(tmp_path: Path) -> None:
    (tmp_path / "svc.py").write_text(
        "import sys, time\ntime.sleep(0.3)\nsys.exit('no such table: refunds')\n"
    )
    (tmp_path / "driver.py").write_text(WAITS)
    rc, text, took = drill(
        tmp_path, "--serve", f"api=python {tmp_path / 'svc.py'} {{port}}", "--", "python",
        str(tmp_path / "driver.py"),
    )  # fmt: skip
    assert rc == 2, text
    line = text.strip().splitlines()[-1]
    assert "service api exited 1 before it was ready" in line and "no such table: refunds" in line, text
    assert took < 30, f"took {took:.1f}s"
