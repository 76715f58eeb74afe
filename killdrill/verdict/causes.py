"""The causes a diagnosis names (stable names: ARCHITECTURE.md) and the fix of each."""

from __future__ import annotations

from killdrill.records import StableName

__all__ = ["FIXES", "CauseName"]


class CauseName(StableName):
    """Why a violation happened, as far as the drill saw (docs: ARCHITECTURE.md, "Stable names")."""

    NO_KEY = "no_key"
    KEY_DROPPED = "key_dropped"
    KEY_NEW_PER_ATTEMPT = "key_new_per_attempt"
    KEY_NEW_PER_CALL = "key_new_per_call"
    SDK_GENERATED_KEY = "sdk_generated_key"
    MODEL_ID_KEY = "model_id_key"
    IRREVERSIBLE_RESENT = "irreversible_resent"
    UNKEYED_RESENT = "unkeyed_resent"
    ROW_NOT_UNIQUE = "row_not_unique"
    PROVIDER_NOT_DEDUPING = "provider_not_deduping"
    KEY_SHARED_BY_EFFECTS = "key_shared_by_effects"
    PAYLOAD_RECOMPUTED = "payload_recomputed"
    UNFINISHED_RESUME = "unfinished_resume"
    RUN_NOT_COMPLETED = "run_not_completed"
    CALL_REFUSED = "call_refused"
    NOT_CALLED = "not_called"
    NON_CONVERGENT_WRITE = "non_convergent_write"
    KEY_ABANDONED = "key_abandoned"
    COMPENSATION_OUT_OF_ORDER = "compensation_out_of_order"
    WORK_RESUBMITTED = "work_resubmitted"
    UNSYNCED_WRITE = "unsynced_write"
    DEPENDENCY_RESTARTED = "dependency_restarted"
    CONSEQUENCE = "consequence"
    RESUME_CRASHED = "resume_crashed"
    ATTEMPT_LIMIT = "attempt_limit"
    HANG = "hang"
    POINT_NOT_REACHED = "point_not_reached"
    HARNESS = "harness_error"
    UNEXPLAINED = "unexplained"


_KEY_FIX = (
    "derive the key from what the action is (thread, step, business ids: "
    "killdrill.effects.idempotency_key(...)), or generate it once and checkpoint it before the call, "
    "and send that same key on every retry and resume"
)
FIXES: dict[CauseName, str] = {
    CauseName.NO_KEY: "send an idempotency key with every call of this effect: " + _KEY_FIX,
    CauseName.KEY_DROPPED: "send the key on every call of the effect, retries and resumes included: "
    + _KEY_FIX,
    CauseName.KEY_NEW_PER_ATTEMPT: "never build the key from uuid4, the clock, a model's output, the "
    "runtime's attempt number or an in-memory counter: " + _KEY_FIX,
    CauseName.KEY_NEW_PER_CALL: "compute the key once per action, before the retry loop, and reuse it "
    "on every retry: " + _KEY_FIX,
    CauseName.SDK_GENERATED_KEY: "pass the key explicitly (stripe: idempotency_key=... on the create call); "
    "the SDK's automatic key is new in every process and only covers its own in-process retries: " + _KEY_FIX,
    CauseName.MODEL_ID_KEY: "never build the key from the model's tool-call id (ToolContext.tool_call_id, a "
    "tool_use id): a model issues new ids on every answer; key by what the call does (thread, tool, its "
    "arguments' business ids): " + _KEY_FIX,
    CauseName.IRREVERSIBLE_RESENT: "gate the send: claim it durably before sending, and when a claim is left "
    "in flight by a kill, reconcile with the provider (mailbox.lookup(ref), the Message-ID) before "
    "sending again (killdrill.effects.gate); make it the last step",
    CauseName.UNKEYED_RESENT: "the provider takes no key: record the call durably with a client "
    "reference and "
    "reconcile with the provider's read (get/lookup by ref) before calling again "
    "(killdrill.effects.durable_effect / gate)",
    CauseName.ROW_NOT_UNIQUE: "make the row's identity unique in the database (a unique constraint on the "
    "columns named in --effect-table) and write it with INSERT ... ON CONFLICT DO NOTHING (or an upsert, "
    "or get-or-create on that constraint), so a re-run finds the row an earlier attempt wrote; or write "
    "it in the same transaction as the step's checkpoint",
    CauseName.PROVIDER_NOT_DEDUPING: "the provider did not replay a repeated key: check that the operation "
    "honours keys (keyed=True in its ProviderSpec) and that the key reaches it (the Idempotency-Key "
    "header, the idempotency_key field); otherwise reconcile by a lookup before repeating",
    CauseName.KEY_SHARED_BY_EFFECTS: "make the key name exactly one action: include what differs between the "
    "effects (account, item, occurrence) in it; a counter held in memory restarts in every process",
    CauseName.PAYLOAD_RECOMPUTED: "compute the payload once, checkpoint it, and send the same value on "
    "replay "
    "(a value read again on resume, a timestamp, a model's wording must come from the checkpoint)",
    CauseName.UNFINISHED_RESUME: "resume whenever the thread is not finished: ask the framework's checkpoint "
    "for pending work, and resume it (a step whose writes were saved before the kill is pending too)",
    CauseName.RUN_NOT_COMPLETED: "fix the failure that stopped the run (listed in this case); the missing "
    "effects follow from it",
    CauseName.CALL_REFUSED: "retry a refused call under the same key with the same payload; a 409 (key in "
    "flight) or an injected failure must be retried, not given up",
    CauseName.NOT_CALLED: "make sure a resumed attempt re-sends every effect its checkpoint does not prove "
    "(with its stable key, so the provider replays it): a step marked done before its effect, or a "
    "resume that stops early, drops it",
    CauseName.NON_CONVERGENT_WRITE: "write the absolute value computed once and checkpointed (a set), "
    "never a "
    "read-modify-write or an increment disguised as a set; use a keyed counter for counts",
    CauseName.KEY_ABANDONED: "after a kill or an ambiguous error, retry with the same key until the provider "
    "answers; never give the key up or switch keys",
    CauseName.COMPENSATION_OUT_OF_ORDER: "undo in the reverse order of the actions (a saga's compensations "
    "run last-done first), each under its own stable key",
    CauseName.WORK_RESUBMITTED: "make the submission idempotent: the client sends one id for the work (an "
    "Idempotency-Key header, the order's own id), the same on every retry and re-run, and the server "
    "starts the work under an id derived from it (the workflow or task id), so a re-sent request "
    "attaches to the run already started, or recovered, instead of starting another",
    CauseName.UNSYNCED_WRITE: (
        "make the checkpoint durable before acting on it: write it to a temporary file, flush and os.fsync "
        "it, os.replace it over the old one, then fsync the directory (open it O_RDONLY, os.fsync); SQLite "
        "in WAL mode: PRAGMA synchronous=FULL (NORMAL syncs no commit); a checkpointer library: its durable"
        " setting.  A SIGKILL keeps what the kernel holds, a power loss does not"
    ),
    CauseName.DEPENDENCY_RESTARTED: (
        "make the run survive its dependency's restart: retry what it stores or sends there until the "
        "dependency is back (a task queue's result backend: result_backend_always_retry=True; a database "
        "or Redis client: reconnect and retry the step, checking first whether it landed), keep what "
        "must outlive a restart durable in the dependency (Redis appendonly, a durable queue, a "
        "synchronous commit), and let a waiter time out and look for the result again instead of "
        "waiting forever"
    ),
    CauseName.CONSEQUENCE: "fix the violation it is listed under",
    CauseName.RESUME_CRASHED: "the resumed attempt failed on its own: fix what its stderr shows (shown with "
    "the attempt); a resume must start from the checkpoint and tolerate the killed attempt's leftovers",
    CauseName.ATTEMPT_LIMIT: "let a resume run after the schedule's last kill: leave --max-attempts out (the "
    "default is the schedule's kills + 3) or set it above the number of kills",
    CauseName.HANG: "find what the last boundary waits on: a lock or claim held by the killed attempt, a key "
    "answered 409 forever; release or reconcile stale claims on resume",
    CauseName.POINT_NOT_REACHED: "a clean run reaches this point and this case did not: the run depends on "
    "state outside its workdir or on timing; put {workdir} and {thread} in the command",
    CauseName.HARNESS: "a harness failure, not a verdict on the agent: if the ledger changed under the case, "
    "the agent deletes files in its workdir's .killdrill/; otherwise report it",
    CauseName.UNEXPLAINED: "compare the effect with the baseline's (shown); if the field legitimately varies "
    "between runs pin the identity (--identity provider.op=fields), else compute it once and checkpoint it",
}
