"""The detection corpus: which agent, which defect, which violation kinds a drill must report.

Each defect agent has exactly one planted defect (marked ``# DEFECT`` in its file).  ``catch``
names the points where the defect must show (the CI test runs the first one); the table runner
drills every point anyway, and records where it was really caught.  ``expect`` uses the stable
kinds of ``killdrill.records``; a defect is caught by a case reporting any of them (and, where
``cause`` is named, carrying that root cause: a right kind for a wrong reason, ``key_changed`` beside
two ``unexpected_effect`` of cause ``unexplained``, is no catch).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from killdrill.examples import (
    BILLING_OPENAI_AGENTS,
    BILLING_OPENAI_AGENTS_ENV,
    BILLING_OPENAI_AGENTS_PRELOAD,
    BILLING_OPENAI_AGENTS_SCRIPT,
    SETTLEMENT,
)
from killdrill.records import (
    COMPENSATION_ORDER,
    DUPLICATE_EFFECT,
    HANG,
    HARNESS_ERROR,
    KEY_CHANGED,
    KEY_REUSED,
    MISSING_EFFECT,
    STATE_DIVERGED,
)

AGENTS_DIR = Path(__file__).resolve().parent / "agents"
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Agent:
    """One corpus entry: ``defect`` is None for a correct agent (which must never fail a case)."""

    name: str
    defect: str | None
    expect: tuple[str, ...] = ()
    catch: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    known_miss: str | None = None  # why the drill cannot see it (a finding), if it cannot
    needs: tuple[tuple[str, str], ...] = ()  # (module, extra) the agent imports: absent -> skipped
    cause: str | None = None  # the root cause a catch must name (a right kind for a wrong reason is no catch)

    def unavailable(self) -> str | None:
        """Why this agent cannot run here (a framework not importable), or None."""
        import importlib.util

        missing = [(m, e) for m, e in self.needs if importlib.util.find_spec(m) is None]
        if not missing:
            return None
        from killdrill.errors import install_hint

        return "; ".join(f"{m} is not importable ({install_hint(e)})" for m, e in missing)

    @property
    def correct(self) -> bool:
        return self.defect is None


def _script(name: str) -> tuple[str, ...]:
    return (sys.executable, str(AGENTS_DIR / f"{name}.py"), "--thread", "{thread}", "--workdir", "{workdir}")


def _defect(name: str, defect: str, expect: tuple[str, ...], catch: tuple[str, ...], **kw: Any) -> Agent:
    return Agent(name, defect, expect, catch, _script(name), **kw)


_LG = {"integrations": ("langgraph",)}
# The bundled DBOS example (killdrill.examples.payout_dbos), one planted bug per --bug value.
_DBOS_OPTIONS: dict[str, Any] = {"cwd": str(REPO), "integrations": ("dbos",)}


def _dbos(bug: str | None) -> tuple[str, ...]:
    cmd = ("python", "-m", "killdrill.examples.payout_dbos", "--thread", "{thread}", "--workdir", "{workdir}")
    return (*cmd, "--bug", bug) if bug else cmd


def _example(module: str, bug: str | None, *args: str) -> tuple[str, ...]:
    """A bundled framework example's command, with its planted bug (``--bug``) or its correct form."""
    cmd = ("python", "-m", f"killdrill.examples.{module}", "--thread", "{thread}", *args)
    return (*cmd, "--bug", bug) if bug else cmd


# The bundled framework examples: the options their drills need, and the
# module each imports (an entry whose framework is not importable is skipped with that reason).
_TEMPORAL_OPTIONS: dict[str, Any] = {"cwd": str(REPO), "integrations": ("temporal",), "timeout": 30}
_OPENAI_AGENTS_OPTIONS: dict[str, Any] = {
    "cwd": str(REPO),
    "integrations": ("openai_agents",),
    "http_fakes": True,
    "smtp_fake": True,
    "env": BILLING_OPENAI_AGENTS_ENV,
    "model_script": BILLING_OPENAI_AGENTS_SCRIPT,
    "timeout": 60,
}
_LLAMA_INDEX_OPTIONS: dict[str, Any] = {"cwd": str(REPO), "integrations": ("llama_index",)}
_CREWAI_OPTIONS: dict[str, Any] = {"cwd": str(REPO), "integrations": ("crewai",), "timeout": 120}
_PYDANTIC_AI_DBOS_OPTIONS: dict[str, Any] = {"cwd": str(REPO), "integrations": ("dbos",)}
_NEEDS_TEMPORAL = (("temporalio", "temporal"),)
_NEEDS_OPENAI_AGENTS = (
    ("agents", "openai-agents"),
    ("stripe", "openai-agents"),
    ("aiosmtpd", "openai-agents"),
)
_NEEDS_LLAMA_INDEX = (("workflows", "llama-index"),)
_NEEDS_CREWAI = (("crewai", "crewai"),)
_NEEDS_PYDANTIC_AI_DBOS = (("pydantic_ai", "pydantic-ai"), ("dbos", "dbos"))
_BILLING = BILLING_OPENAI_AGENTS  # ... --thread {thread} --db {workdir}/session.sqlite


def _billing(bug: str | None) -> tuple[str, ...]:
    return (*_BILLING, "--bug", bug) if bug else _BILLING


# What a fork template preloads for each (tests/detection/test_detection.py forks attempts).
FORK_PRELOAD: dict[str, tuple[str, ...]] = {
    "payout_temporal": ("killdrill.examples.payout_temporal",),
    "temporal_receipt": ("temporalio.client", "temporalio.worker"),
    "temporal_receipt_attempt_key": ("temporalio.client", "temporalio.worker"),
    "billing_openai_agents": BILLING_OPENAI_AGENTS_PRELOAD,
    "ticket_llama_index": ("workflows",),
    "pydantic_ai_dbos": (
        "dbos",
        "pydantic_ai",
        "pydantic_ai.durable_exec.dbos",
        "pydantic_ai.models.function",
    ),
}


def _shape(script: str, bug: str | None) -> tuple[str, ...]:
    """A shape agent (one script, a correct mode and a planted-bug mode)."""
    return _script(script) + (("--bug", bug) if bug else ())


# Agents that are correct but not deterministic (parallel branches, thread-dependent
# work, volatile fields) and the bug each hides from a verdict that pairs calls by ledger order.
SHAPE_DEFECTS: tuple[Agent, ...] = (
    Agent(
        "send_payouts_uuid_key",
        "Send fan-out: per-branch key from uuid4",
        (DUPLICATE_EFFECT, KEY_CHANGED),
        ("during:payments.charge#2", "committed:pay"),
        _shape("lg_send_payouts", "uuid_key"),
        _LG,
    ),
    Agent(
        "superstep_clock_key",
        "two nodes in one superstep: fee key from the clock",
        (DUPLICATE_EFFECT, KEY_CHANGED),
        ("after:charge_fee",),
        _shape("lg_superstep", "clock_key"),
        _LG,
    ),
    Agent(
        "thread_workload_uuid_key",
        "thread-dependent work: notification key from uuid4",
        (DUPLICATE_EFFECT, KEY_CHANGED),
        ("during:webhooks.post", "after:notify_0"),
        _shape("thread_workload", "uuid_key"),
    ),
    Agent(
        "restamp_sent_at",
        "sequential: sent_at re-stamped under a stable key",
        (KEY_REUSED,),
        ("during:payments.charge", "after:send_acct_north"),
        _shape("restamp", "restamp"),
    ),
    Agent(
        "wipe_ledger",
        "restart wipes every SQLite file, the ledger too",
        (HARNESS_ERROR,),
        ("during:payments.charge", "after:charge"),
        _shape("wipe_ledger", "wipe_all"),
    ),
)

SHAPE_CORRECT: tuple[Agent, ...] = (
    Agent(
        "send_payouts",
        None,
        catch=("during:payments.charge#2", "committed:pay"),
        command=_shape("lg_send_payouts", None),
        options=_LG,
    ),
    Agent(
        "superstep",
        None,
        catch=("after:charge_fee", "during:payments.charge#2"),
        command=_shape("lg_superstep", None),
        options=_LG,
    ),
    Agent(
        "thread_workload",
        None,
        catch=("during:webhooks.post", "committed:notify_0"),
        command=_shape("thread_workload", None),
    ),
    Agent(
        "restamp",
        None,
        catch=("during:payments.charge", "during:payments.charge#2"),
        command=_shape("restamp", None),
    ),
    Agent(
        "wipe_ledger_scratch",
        None,
        catch=("during:payments.charge", "after:charge"),
        command=_shape("wipe_ledger", None),
    ),
)


# Temporal written the way its documentation writes it (starter and worker in one command, sync
# activities on a thread pool, start-to-close 3 s, the default retry policy): a receipt naming the
# charge's id, and the charge keyed by the activity's attempt number in the buggy form.
TEMPORAL_RECEIPT: tuple[Agent, ...] = (
    Agent(
        "temporal_receipt_attempt_key",
        "Temporal activity key built from activity.info().attempt",
        (DUPLICATE_EFFECT, KEY_CHANGED),
        ("during:payments.charge", "after:charge"),
        _shape("temporal_receipt", "attempt_key"),
        {"integrations": ("temporal",), "timeout": 60},
        needs=(("temporalio", "temporal"),),
        cause="key_new_per_attempt",
    ),
    Agent(
        "temporal_receipt",
        None,
        catch=("during:payments.charge", "after:charge"),
        command=_shape("temporal_receipt", None),
        options={"integrations": ("temporal",), "timeout": 60},
        needs=(("temporalio", "temporal"),),
    ),
)


DEFECTS: tuple[Agent, ...] = (
    _defect(
        "uuid_key",
        "key from uuid4",
        (KEY_CHANGED, DUPLICATE_EFFECT),
        ("during:payments.charge", "after:charge"),
    ),
    _defect(
        "clock_key",
        "key from the clock",
        (KEY_CHANGED, DUPLICATE_EFFECT),
        ("during:payments.charge", "after:charge"),
    ),
    _defect(
        "model_key",
        "key from an unpinned model output",
        (KEY_CHANGED, DUPLICATE_EFFECT),
        ("during:payments.charge", "after:charge"),
    ),
    _defect(
        "memory_counter",
        "key from a counter held in memory",
        (KEY_REUSED,),
        ("committed:charge_acme", "before:charge_globex"),
    ),
    _defect(
        "key_not_forwarded", "key not forwarded downstream", (DUPLICATE_EFFECT,), ("during:payments.charge",)
    ),
    _defect(
        "release_on_ambiguous", "release on an ambiguous error", (DUPLICATE_EFFECT,), ("during:mailbox.send",)
    ),
    _defect(
        "racy_claim",
        "read-then-insert claim (2 resumers)",
        (DUPLICATE_EFFECT,),
        ("before:notify", "committed:load_order"),
        options={"resumers": 2},
    ),
    _defect(
        "nonidempotent_compensation",
        "non-idempotent compensation",
        (DUPLICATE_EFFECT,),
        ("during:inventory.release", "after:compensate"),
    ),
    _defect(
        "compensation_wrong_order",
        "compensation in the wrong order",
        (COMPENSATION_ORDER,),
        ("during:inventory.release",),
        # Every effect lands exactly once: only the opt-in order check sees it (a count cannot).
        options={"checks": ("compensation_order",)},
    ),
    _defect(
        "irreversible_mid_graph",
        "irreversible action mid-graph",
        (DUPLICATE_EFFECT,),
        ("during:payments.charge", "after:settle"),
    ),
    _defect(
        "increment_as_set",
        "increment disguised as a set (kv)",
        (STATE_DIVERGED,),
        ("during:kv.set", "after:credit"),
    ),
    _defect(
        "payload_recomputed",
        "payload recomputed on replay",
        (KEY_REUSED,),
        ("during:payments.charge", "after:charge"),
    ),
    _defect(
        "checkpoint_as_truth",
        "checkpoint taken as truth of external state",
        (MISSING_EFFECT,),
        ("committed:charge_marked",),
    ),
    _defect(
        "receipt_before_commit",
        "receipt sent before the charge is committed",
        (DUPLICATE_EFFECT,),
        ("during:mailbox.send", "after:charge"),
    ),
    _defect("no_key_webhook", "webhook posted without a key", (DUPLICATE_EFFECT,), ("during:webhooks.post",)),
    _defect(
        "counter_no_key",
        "counter increment without a key",
        (DUPLICATE_EFFECT,),
        ("during:counter.increment",),
    ),
    *SHAPE_DEFECTS,
    TEMPORAL_RECEIPT[0],
    *(
        Agent(f"payout_dbos {bug} (bundled)", why, expect, catch, _dbos(bug), options=_DBOS_OPTIONS)
        for bug, why, expect, catch in (
            (
                "uuid_key",
                "DBOS step charges with a uuid4 key",
                (KEY_CHANGED, DUPLICATE_EFFECT),
                ("after:charge",),
            ),
            (
                "clock_key",
                "DBOS charge key from the workflow's start time, read in the body",
                (KEY_CHANGED, DUPLICATE_EFFECT),
                ("after:charge",),
            ),
            (
                "email_then_work",
                "DBOS step sends an email, then does more work",
                (DUPLICATE_EFFECT,),
                ("during:kv.set#2", "after:send_receipt"),
            ),
        )
    ),
    *(
        Agent(
            f"payout_temporal {bug} (bundled)",
            why,
            expect,
            catch,
            _example("payout_temporal", bug),
            options={**_TEMPORAL_OPTIONS, **extra},
            needs=_NEEDS_TEMPORAL,
        )
        for bug, why, expect, catch, extra in (
            (
                "attempt-key",
                "Temporal activity key includes activity.info().attempt",
                (KEY_CHANGED, DUPLICATE_EFFECT),
                ("after:charge_customer", "during:payments.charge"),
                {},
            ),
            (
                "uuid-key",
                "Temporal activity key from uuid4",
                (KEY_CHANGED, DUPLICATE_EFFECT),
                ("after:charge_customer", "during:payments.charge"),
                {},
            ),
            (
                "no-heartbeat",
                "Temporal long activity without heartbeat (5 min start-to-close)",
                (HANG,),  # the server holds the killed activity: the resumed worker has nothing to do
                ("during:tickets.create#2",),
                {"timeout": 12},
            ),
        )
    ),
    Agent(
        "billing_openai_agents call-id-key (bundled)",
        "OpenAI Agents tool keys the charge by the tool-call id",
        (KEY_CHANGED, DUPLICATE_EFFECT),
        ("after:charge_card", "during:payments.charge"),
        _billing("call-id-key"),
        # The model fake's call ids differ on every answer, as a real model's: caught with no flag.
        options=_OPENAI_AGENTS_OPTIONS,
        needs=_NEEDS_OPENAI_AGENTS,
    ),
    Agent(
        "billing_openai_agents receipt-ungated (bundled)",
        "OpenAI Agents receipt sent again (session saved after the turn's tools)",
        (DUPLICATE_EFFECT,),
        ("after:send_receipt", "during:mailbox.send"),
        _billing("receipt-ungated"),
        options=_OPENAI_AGENTS_OPTIONS,
        needs=_NEEDS_OPENAI_AGENTS,
    ),
    Agent(
        "ticket_llama_index save_before_effect (bundled)",
        "LlamaIndex context saved before the step's effect is confirmed",
        (MISSING_EFFECT,),
        ("committed:checkpoint#2",),
        _example("ticket_llama_index", "save_before_effect", "--workdir", "{workdir}"),
        options=_LLAMA_INDEX_OPTIONS,
        needs=_NEEDS_LLAMA_INDEX,
    ),
    Agent(
        "onboarding_crewai rerun_finished (bundled)",
        "CrewAI flow restarted with kickoff(inputs={'id'}) re-runs finished methods",
        (DUPLICATE_EFFECT,),
        ("after:send_welcome", "during:mailbox.send", "committed:send_welcome"),
        _example("onboarding_crewai", "rerun_finished", "--workdir", "{workdir}"),
        options=_CREWAI_OPTIONS,
        needs=_NEEDS_CREWAI,
    ),
    Agent(
        "pydantic_ai_dbos uuid_key (bundled)",
        "pydantic-ai tool (a DBOS step) charges with a uuid4 key",
        (KEY_CHANGED, DUPLICATE_EFFECT),
        ("after:charge_card", "during:payments.charge"),
        _example("pydantic_ai_dbos", "uuid_key", "--workdir", "{workdir}"),
        options=_PYDANTIC_AI_DBOS_OPTIONS,
        needs=_NEEDS_PYDANTIC_AI_DBOS,
    ),
)

_LANGGRAPH = (
    "python",
    "-m",
    "killdrill.examples.settlement_langgraph",
    "--thread",
    "{thread}",
    "--db",
    "{workdir}/ckpt.sqlite",
    "--durability",
    "sync",
)

CORRECT: tuple[Agent, ...] = (
    Agent(
        "ok_loop_accounts",
        None,
        catch=("during:payments.charge#2", "after:settle_globex"),
        command=_script("ok_loop_accounts"),
    ),
    Agent(
        "ok_branching",
        None,
        catch=("during:payments.charge", "during:tickets.create"),
        command=_script("ok_branching"),
    ),
    Agent(
        "ok_saga",
        None,
        catch=("during:inventory.release", "during:payments.refund"),
        command=_script("ok_saga"),
        options={"checks": ("compensation_order",)},  # a correct saga passes the order check too
    ),
    Agent(
        "settlement (bundled)",
        None,
        catch=("during:payments.charge", "during:mailbox.send"),
        command=SETTLEMENT,
        options={"cwd": str(REPO)},
    ),
    Agent(
        "settlement_langgraph (bundled)",
        None,
        catch=("during:payments.charge", "during:mailbox.send"),
        command=_LANGGRAPH,
        options={"cwd": str(REPO), "integrations": ("langgraph",)},
    ),
    Agent(
        "payout_dbos (bundled)",
        None,
        catch=("after:charge", "during:mailbox.send", "committed:charge"),
        command=_dbos(None),
        options=_DBOS_OPTIONS,
    ),
    Agent(
        "payout_temporal (bundled)",
        None,
        catch=("after:charge_customer", "during:payments.charge", "committed:charge_customer"),
        command=_example("payout_temporal", None),
        options=_TEMPORAL_OPTIONS,
        needs=_NEEDS_TEMPORAL,
    ),
    Agent(
        "billing_openai_agents (bundled)",
        None,
        catch=("after:charge_card", "during:mailbox.send", "committed:charge_card"),
        command=_billing(None),
        # Varied model output: the correct key (thread and order) must not depend on it.
        options={**_OPENAI_AGENTS_OPTIONS, "model_variance": 0},
        needs=_NEEDS_OPENAI_AGENTS,
    ),
    Agent(
        "ticket_llama_index (bundled)",
        None,
        catch=("committed:checkpoint#2", "during:payments.charge", "after:charge"),
        command=_example("ticket_llama_index", None, "--workdir", "{workdir}"),
        options=_LLAMA_INDEX_OPTIONS,
        needs=_NEEDS_LLAMA_INDEX,
    ),
    Agent(
        "onboarding_crewai (bundled)",
        None,
        catch=("after:send_welcome", "during:mailbox.send", "committed:send_welcome"),
        command=_example("onboarding_crewai", None, "--workdir", "{workdir}"),
        options=_CREWAI_OPTIONS,
        needs=_NEEDS_CREWAI,
    ),
    Agent(
        "pydantic_ai_dbos (bundled)",
        None,
        catch=("after:charge_card", "during:payments.charge", "committed:charge_card"),
        command=_example("pydantic_ai_dbos", None, "--workdir", "{workdir}"),
        options=_PYDANTIC_AI_DBOS_OPTIONS,
        needs=_NEEDS_PYDANTIC_AI_DBOS,
    ),
    *SHAPE_CORRECT,
    TEMPORAL_RECEIPT[1],
)

CORPUS: tuple[Agent, ...] = DEFECTS + CORRECT


def langgraph_available() -> bool:
    """The LangGraph agent needs langgraph installed and the bundled example present."""
    import importlib.util

    return (
        importlib.util.find_spec("langgraph") is not None
        and (REPO / "killdrill" / "examples" / "settlement_langgraph.py").exists()
    )
