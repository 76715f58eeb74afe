"""What an integration's service says of a hung run is asked only of a service the run used: a
variable it gives each launch that the user's ``--env`` replaced (a Celery broker given as a
``--serve`` Redis) means the run talked to something else, and the service's account of its own
broker would describe a run that never used it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from killdrill.drill import Drill, DrillOptions
from killdrill.drill.workdirs import RunContext


class Broker:
    """A service that gives each launch its broker and says it holds none of the run's tasks."""

    def env(self, workdir: Path, thread: str) -> dict[str, str]:
        return {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0", "KILLDRILL_CELERY_KEYPREFIX": "kd"}

    def explain_hang(self, workdir: Path, thread: str) -> tuple[str, dict[str, Any]] | None:
        return "the Celery broker (redis://127.0.0.1:6379/0) holds none of the run's tasks", {}

    def close(self) -> None:
        pass


def _asked(tmp_path: Path, env: dict[str, str]) -> tuple[str, dict[str, Any]] | None:
    with Drill(["python", "-c", "pass"], DrillOptions(root=tmp_path, env=env)) as drill:
        drill.setup._services = [Broker()]
        return drill.setup.explain_hang(RunContext(tmp_path / "case", "kd-x"))


def test_the_service_a_run_used_says_what_it_holds(tmp_path: Path) -> None:
    said = _asked(tmp_path, {"OTHER": "1"})
    assert said is not None and "holds none of the run's tasks" in said[0]


def test_a_service_whose_variables_the_user_replaced_is_not_asked(tmp_path: Path) -> None:
    assert _asked(tmp_path, {"CELERY_BROKER_URL": "redis://127.0.0.1:7000/0"}) is None
