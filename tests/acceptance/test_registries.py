"""Extending killdrill in one file: a fake provider and a verdict check, each defined *here*, outside
the package, and picked up by the in-process fakes, the HTTP fakes and the verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from killdrill import integrations
from killdrill.drill import Drill, DrillOptions
from killdrill.errors import UsageError
from killdrill.fakes import Operation, Provider, connect
from killdrill.fakes.http import FakesServer
from killdrill.ledger import Ledger, Tx
from killdrill.providers import spec
from killdrill.records import LedgerSnapshot, Violation
from killdrill.registry import Registry
from killdrill.verdict import OPT_IN_CHECKS, CheckContext, check, judge

AGENTS = Path(__file__).resolve().parents[1] / "agents" / "basic"


# ---- a provider, declared once --------------------------------------------------------------------
class Bells(Provider):
    """A doorbell API: every ring rings unless a key repeats; ``silence`` undoes a ring."""

    name = "bells"
    operations = (
        Operation("ring", keyed=True),
        Operation("silence", undoes="ring", target="ring_id"),
        Operation("rung", read=True),
    )

    def ring(self, idempotency_key: str | None = None, **payload: Any) -> dict[str, Any]:
        return self._invoke("ring", idempotency_key, payload, self._create("bell", {**payload, "rung": True}))

    def silence(self, ring_id: str) -> dict[str, Any]:
        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            tx.update_effect(self.name, ring_id, {"id": ring_id, "rung": False})
            return ring_id, {"id": ring_id, "rung": False}

        return self._invoke("silence", None, {"ring_id": ring_id}, perform)

    def rung(self, ring_id: str) -> bool:
        effect = self.ledger.effect(self.name, ring_id)
        return bool(effect and effect.get("rung"))


class Dimmer(Provider):
    """An idempotent write (set a level): declared convergent, so repeating it is no duplicate."""

    name = "dimmer"
    operations = (Operation("dim"),)
    convergent = True

    def dim(self, level: int) -> dict[str, Any]:
        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            return "dim", {"level": level}

        return self._invoke("dim", None, {"level": level}, perform)


def _snapshot(path: Path, thread: str, calls: Any) -> LedgerSnapshot:
    fakes = connect(str(path), thread=thread)
    calls(fakes)
    return Ledger(str(path), thread).snapshot()


def test_the_registry_knows_what_the_provider_declared() -> None:
    assert spec("bells").operation("ring").keyed  # type: ignore[union-attr]
    assert not spec("bells").convergent and spec("dimmer").convergent
    assert spec("no_such_provider").operations == ()  # undeclared: a plain, counted effect
    with pytest.raises(TypeError, match="no such method"):

        class Broken(Provider):
            name = "broken"
            operations = (Operation("typo"),)


def test_a_provider_from_outside_works_in_process(tmp_path: Path) -> None:
    fakes = connect(str(tmp_path / "l.sqlite"), thread="t")
    first = fakes.bells.ring(idempotency_key="k1", door="front")
    again = fakes.provider("bells").ring(idempotency_key="k1", door="front")  # type: ignore[attr-defined]
    assert again["id"] == first["id"] and again["replayed"] and not first["replayed"]
    assert fakes.bells.rung(first["id"])
    fakes.bells.silence(first["id"])
    assert not fakes.bells.rung(first["id"])
    assert [c.outcome for c in fakes.bells.calls()] == ["created", "replayed", "created"]


def _post(url: str, path: str, body: dict[str, Any], key: str | None = None) -> tuple[int, Any, Any]:
    headers = {"Content-Type": "application/json", **({"Idempotency-Key": key} if key else {})}
    req = urllib.request.Request(url + path, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read()), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers


def test_a_provider_from_outside_is_served_over_http(tmp_path: Path) -> None:
    with FakesServer(tmp_path / "l.sqlite", thread="t") as server:
        assert server.url is not None
        status, body, headers = _post(server.url, "/fakes/bells/ring", {"door": "back"}, key="k2")
        assert status == 200 and body["door"] == "back" and headers["Idempotent-Replayed"] == "false"
        status, again, headers = _post(server.url, "/fakes/bells/ring", {"door": "back"}, key="k2")
        assert (status, again["id"], headers["Idempotent-Replayed"]) == (200, body["id"], "true")
        status, read, _ = _post(server.url, "/fakes/bells/rung", {"ring_id": body["id"]})
        assert (status, read) == (200, {"result": True})
        status, _, _ = _post(server.url, "/fakes/bells/undeclared", {})
        assert status == 404
    calls = Ledger(str(tmp_path / "l.sqlite"), "t").calls("bells")
    assert [(c.op, c.key, c.outcome) for c in calls] == [
        ("ring", "k2", "created"),
        ("ring", "k2", "replayed"),
    ]


def test_the_verdict_judges_a_provider_from_outside_by_its_declaration(tmp_path: Path) -> None:
    baseline = _snapshot(tmp_path / "b.sqlite", "t", lambda f: (f.bells.ring(door="front"), f.dimmer.dim(3)))

    def twice(f: Any) -> None:
        for _ in range(2):  # a resumed attempt that rings again without a key, and dims again
            f.bells.ring(door="front")
            f.dimmer.dim(3)

    case = _snapshot(tmp_path / "c.sqlite", "t", twice)
    violations = judge(baseline, case, ())
    assert [(v.kind, v.provider) for v in violations] == [("duplicate_effect", "bells")]
    assert "bells.ring {door: front} landed 2 times (baseline 1)" in violations[0].message


def test_the_compensation_check_reads_an_outside_providers_undo_declaration(tmp_path: Path) -> None:
    def undo_in_wrong_order(f: Any) -> None:
        a, b = f.bells.ring(door="a"), f.bells.ring(door="b")
        f.bells.silence(a["id"])  # the first ring undone first: should be the last
        f.bells.silence(b["id"])

    case = _snapshot(tmp_path / "c.sqlite", "t", undo_in_wrong_order)
    kinds = [v.kind for v in judge(case, case, (), checks=("compensation_order",))]
    assert kinds == ["compensation_order"]


# ---- a check, registered once ---------------------------------------------------------------------
@check("keyless_call", opt_in=True)
def keyless_call(ctx: CheckContext) -> list[Violation]:
    """A call to an operation its provider declares keyed landed without a key."""
    out = []
    for c in ctx.case.calls:
        op = spec(c.provider).operation(c.op)
        if c.landed and c.key is None and op is not None and op.keyed:
            out.append(
                Violation("keyless_call", f"{c.provider}.{c.op} landed without a key", c.provider, c.op)
            )
    return out


def test_a_check_from_outside_is_opt_in_and_composed_by_judge(tmp_path: Path) -> None:
    assert "keyless_call" in OPT_IN_CHECKS
    case = _snapshot(tmp_path / "c.sqlite", "t", lambda f: f.bells.ring(door="x"))
    assert judge(case, case, ()) == []
    found = judge(case, case, (), checks=("keyless_call",))
    assert [(v.kind, v.message) for v in found] == [("keyless_call", "bells.ring landed without a key")]
    with pytest.raises(UsageError, match=r"unknown check .nope.*keyless_call"):
        judge(case, case, (), checks=("nope",))


def test_a_check_from_outside_reports_in_a_real_drill(tmp_path: Path) -> None:
    """steps.py ``--bug nokey`` charges without a key: the outside check names it in the case."""
    cmd = [sys.executable, str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]
    drill = Drill(
        [*cmd, "--bug", "nokey"],
        DrillOptions(timeout=30.0, root=str(tmp_path / "r"), checks=("keyless_call",)),
    )
    case = drill.run_case("after:record")
    assert "keyless_call" in case.kinds, case.text()
    plain = Drill(cmd, DrillOptions(timeout=30.0, root=str(tmp_path / "p"), checks=("keyless_call",)))
    assert plain.run_case("after:record").ok


# ---- an integration, found by entry point ---------------------------------------------------------
_DOORBELL = """
import os
from killdrill.integrations import Integration

INTEGRATION = Integration("doorbell", preload=("json",), internal_steps=frozenset({"ding"}))


def activate():
    with open(os.environ["DOORBELL_MARK"], "w") as f:
        f.write("active")
"""


def _install_doorbell(where: Path) -> None:
    """A distribution on ``where`` (as pip would lay it out) whose entry point names the module."""
    (where / "kd_doorbell.py").write_text(_DOORBELL)
    dist = where / "kd_doorbell-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kd-doorbell\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[killdrill.integrations]\ndoorbell = kd_doorbell\n")


def test_an_integration_from_outside_declares_its_preload_and_internal_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_doorbell(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh = Registry("integration", integrations.ENTRY_POINT_GROUP, find=integrations._find_module)
    monkeypatch.setattr(integrations, "_INTEGRATIONS", fresh)  # forget what earlier tests found
    integrations._installed_names.cache_clear()  # the distribution was installed just now
    assert integrations.find("doorbell").preload == ("json",)
    assert integrations.preload_modules(["doorbell", "langgraph"]) == ["json", "langgraph.graph"]
    assert integrations.internal_steps() >= {"ding", "checkpoint"}
    with pytest.raises(integrations.IntegrationNotFound, match="unknown integration 'nope'"):
        integrations.find("nope")
    integrations._installed_names.cache_clear()  # forget the distribution for the next tests


def test_the_bootstrap_activates_an_integration_found_by_entry_point(tmp_path: Path) -> None:
    _install_doorbell(tmp_path)
    mark = tmp_path / "mark"
    bootstrap = Path(integrations.__file__).resolve().parent / "_bootstrap"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(bootstrap), str(tmp_path)]),
        "KILLDRILL_INTEGRATIONS": "doorbell",
        "DOORBELL_MARK": str(mark),
    }
    done = subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert mark.read_text() == "active"
