"""A deployment's processes forked from the warm template (``--launcher fork``): a service killed
mid-request is started again as a fork, its modules already imported, and every launch is set up
as a fresh process would be (its own pid and session, the case's environment and filled command);
the verdict is the one a spawned deployment gets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.acceptance.test_deployments import CLIENT, SHOP, drill

PRELOADED = "xml.dom.minidom"  # imported by the template only: in a fork's sys.modules from its start


@pytest.mark.parametrize("bug", [[], ["--bug", "nokey"]], ids=["correct", "nokey"])
def test_a_forked_service_killed_mid_request_restarts_and_the_verdict_holds(
    tmp_path: Path, bug: list[str]
) -> None:
    rc, text = drill(
        tmp_path, "api:during:payments.charge", "--launcher", "fork", "--preload", PRELOADED,
        "--serve", " ".join([SHOP, *bug]), "--", *CLIENT,
    )  # fmt: skip
    assert rc == (1 if bug else 0), text
    assert "(api) kill api:during:payments.charge" in text, text
    assert "(api) ran free: drained" in text, text  # the restarted service, stopped at the case's end
    if bug:
        assert "duplicate_effect" in text, text


@pytest.mark.skipif(sys.platform != "linux", reason="sessions and /proc are Linux's")
def test_each_forked_launch_is_set_up_as_a_fresh_process(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, os, sys, time, killdrill\n"
        f"pre = {PRELOADED!r} in sys.modules\n"
        "name = os.environ['KILLDRILL_PROCESS']\n"
        "with killdrill.node('up'):\n"
        "    record = {'pid': os.getpid(), 'sid': os.getsid(0), 'pre': pre, 'argv': sys.argv[1:],\n"
        "              'cwd': os.getcwd(), 'main': __name__}\n"
        "    path = os.path.join(os.environ['KILLDRILL_WORKDIR'], f'{name}-{os.getpid()}.json')\n"
        "    open(path, 'w').write(json.dumps(record))\n"
        "if name != 'driver':\n"
        "    open(os.path.join(os.environ['KILLDRILL_WORKDIR'], f'passed.{os.getpid()}'), 'w').close()\n"
        "    time.sleep(60)\n"
        "# the driver ends once a side has passed after:up (in the case, the restarted one): a clean\n"
        "# run that ended first would tear the side down before its point, and the catalogue lack it\n"
        "for _ in range(600):\n"
        "    if any(f.startswith('passed.') for f in os.listdir(os.environ['KILLDRILL_WORKDIR'])):\n"
        "        break\n"
        "    time.sleep(0.05)\n"
    )
    rc, text = drill(
        tmp_path, "side:after:up", "--keep", "--launcher", "fork", "--preload", PRELOADED,
        "--serve", f"side=python {probe} {{thread}} {{replica}}", "--", "python", str(probe), "{thread}",
    )  # fmt: skip
    assert rc == 0, text
    (case,) = [p for p in (tmp_path / "w").iterdir() if "after_up" in p.name]
    records = {p.name: json.loads(p.read_text()) for p in case.glob("*.json") if "-" in p.stem}
    sides = [r for n, r in records.items() if n.startswith("side-")]
    [driver] = [r for n, r in records.items() if n.startswith("driver-")]
    assert len(sides) == 2, records  # killed after its point, started again
    for r in [*sides, driver]:
        assert r["pre"] and r["sid"] == r["pid"] and r["main"] == "__main__", r  # a fork, its own session
        assert r["cwd"] == str(tmp_path), r
    assert sides[0]["pid"] != sides[1]["pid"]
    assert sides[0]["argv"] == sides[1]["argv"] == [driver["argv"][0], "0"], sides  # filled, as started
    assert driver["argv"][0].startswith("kd-"), driver
