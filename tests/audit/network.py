"""Whole drills under ``strace -f`` in a hostile environment: every connect any process of the
drill tries (harness, agents, services, proxies, runtime servers), counted by destination.

The environment is a corporate machine's or a CI runner's: proxy variables pointing off the
machine (an address, so a connect to it needs no name lookup to be seen), and vendors' keys.
A connect to anything but the loopback, or a datagram to port 53 (a name looked up), counts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.audit.topologies import REPO, Topology

OFF_MACHINE = "10.255.255.1"
HOSTILE = {
    **{
        name: f"http://{OFF_MACHINE}:3128"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
    },
    "ALL_PROXY": f"socks5://{OFF_MACHINE}:1080",
    "all_proxy": f"socks5://{OFF_MACHINE}:1080",
    "STRIPE_API_KEY": "sk_live_51AbcDefGhiJklMnoPqrStuVwxYz0123456789",
    "STRIPE_SECRET_KEY": "sk_live_51AbcDefGhiJklMnoPqrStuVwxYz0123456789",
    "AWS_ACCESS_KEY_ID": "AKIAABCDEFGHIJKLMNOP",
    "AWS_SECRET_ACCESS_KEY": "abcdefghijklmnopqrstuvwxyz0123456789ABCD",
    "OPENAI_API_KEY": "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678Stu901VwxYz",
}
_INET = re.compile(
    r"connect\(\d+, \{sa_family=AF_INET6?, sin6?_port=htons\((\d+)\), "
    r"(?:.*?inet_addr\(\"([^\"]+)\"\)|.*?inet_pton\(AF_INET6, \"([^\"]+)\")"
)
_DNS = re.compile(r"(?:sendto|sendmsg|sendmmsg)\(.*sin6?_port=htons\(53\)")
_LOOPBACK = re.compile(r"^(127\.|::1$|::ffff:127\.)")


@dataclass
class Traced:
    topology: str
    exit: int
    connects: int  # inet connects tried, loopback included: the trace sees them at all
    off_machine: list[str] = field(default_factory=list)
    dns: int = 0
    tracebacks: int = 0
    left: list[str] = field(default_factory=list)  # in the temporary folder after the drill
    tail: str = ""


def traced(topology: Topology, base: Path, limit_s: float = 900) -> Traced:
    tmp = Path(tempfile.mkdtemp(prefix="audit-strace-", dir=base))
    trace = tmp.parent / f"{tmp.name}.trace"
    env = {**os.environ, **HOSTILE, "TMPDIR": str(tmp)}
    cmd = [
        *("strace", "-f", "-qq", "-e", "trace=connect,sendto,sendmsg,sendmmsg", "-e", "signal=none"),
        *(
            "-o",
            str(trace),
            sys.executable,
            "-m",
            "killdrill",
            "drill",
            "--discovery-runs",
            "1",
            *topology.args,
        ),
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=limit_s)
        code = proc.returncode
    except subprocess.TimeoutExpired:  # what was traced so far still counts; the drill is stopped
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate()
        code = -1
    text = trace.read_text(errors="replace")
    tried = [(m.group(2) or m.group(3), m.group(1)) for m in _INET.finditer(text)]
    off = sorted({f"{host}:{port}" for host, port in tried if not _LOOPBACK.match(host)})
    result = Traced(
        topology.name,
        code,
        len(tried),
        off,
        len(_DNS.findall(text)),
        (stdout + stderr).count("Traceback"),
        sorted(p.name for p in tmp.iterdir()),
        ""
        if code == 0
        else ("stopped at the time limit: " if code == -1 else "") + (stdout + stderr)[-1500:],
    )
    trace.unlink()
    if not result.left:
        tmp.rmdir()
    return result
