"""The frameworks ``killdrill conform`` probes: what to install, how to run the probe, which point
commits its middle step, and what a property cannot mean for it (with why)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROBES = "killdrill.conform.probes"


@dataclass(frozen=True)
class Framework:
    """One framework's probe and its points.  ``committed`` is the point where the framework has
    recorded the middle step ``charge`` (the kill of prefix continuation and the fork); ``rerun`` is
    the point a re-execution of it reaches again; ``next_point`` the point of the step after it."""

    name: str  # the integration (--integration NAME)
    title: str
    distribution: str  # whose version the table shows
    module: str  # importable when installed
    extra: str  # pip install -e ".[EXTRA]" (hyphenated, as pip normalizes it)
    committed: str
    committed_means: str = "the framework recorded the step"
    rerun: str = "before:charge"
    next_point: str = "before:notify"
    na: dict[str, str] = field(default_factory=dict)  # property -> why it does not apply
    not_probed: dict[str, str] = field(default_factory=dict)  # property -> why no probe is bundled
    options: dict[str, Any] = field(default_factory=dict)  # extra DrillOptions fields
    install_note: str = ""
    missing_note: str = ""  # why killdrill has no integration for it yet

    @property
    def probe(self) -> str:
        return f"{PROBES}.{self.name}_probe"

    def model_script(self) -> str | None:
        """The scripted model's file of a probe that calls a model (bundled beside it), or None."""
        if not self.options.get("model"):
            return None
        return str(Path(__file__).parent / "probes" / f"{self.name}_probe.yaml")

    def command(self, *extra: str) -> list[str]:
        return ["python", "-m", self.probe, "--thread", "{thread}", "--workdir", "{workdir}/state", *extra]

    def installed(self) -> bool:
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False

    def version(self) -> str | None:
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None

    def integration_available(self) -> bool:
        return importlib.util.find_spec(f"killdrill.integrations.{self.name}") is not None


FRAMEWORKS: tuple[Framework, ...] = (
    Framework(
        "langgraph",
        "LangGraph",
        "langgraph",
        "langgraph",
        "langgraph",
        committed="committed:charge",
        options={"preload": ("langgraph.checkpoint.sqlite",)},
    ),
    Framework(
        "llama_index",
        "LlamaIndex Workflows",
        "llama-index-workflows",
        "workflows",
        "llama-index",
        # the basic runtime persists nothing: the user's save of Context.to_dict() after a step's
        # event is the record (the integration's committed:checkpoint, #2 = after charge)
        committed="committed:checkpoint#2",
        committed_means="the runner saved Context.to_dict() at charge's progress event, the documented"
        " save-while-streaming pattern; the runtime itself persists nothing",
    ),
    Framework(
        "crewai",
        "CrewAI Flows",
        "crewai",
        "crewai",
        "crewai",
        committed="committed:charge",
        install_note="in a venv of its own: crewai pins openai<3, which openai-agents cannot share",
        options={"timeout": 120.0},
    ),
    Framework(
        "temporal",
        "Temporal",
        "temporalio",
        "temporalio",
        "temporal",
        committed="committed:charge",
        na={
            "fork_determinism": "the durable state is the server's event history, not a file a drill "
            "can copy; Temporal's own fork is a workflow reset, which is another operation",
        },
        options={"timeout": 60.0},
    ),
    Framework(
        "openai_agents",
        "OpenAI Agents SDK",
        "openai-agents",
        "agents",
        "openai-agents",
        committed="committed:charge",
        options={"model": True},
    ),
    Framework(
        "dbos",
        "DBOS",
        "dbos",
        "dbos",
        "dbos",
        committed="committed:charge",
        committed_means="DBOS recorded the step's output (operation_outputs)",
    ),
)


def by_name(names: list[str] | None) -> list[Framework]:
    """The frameworks asked for (all by default), in the table's order; an unknown name is an error."""
    if not names:
        return list(FRAMEWORKS)
    known = {f.name: f for f in FRAMEWORKS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(unknown[0])
    return [f for f in FRAMEWORKS if f.name in names]
