"""The settlement agent as a real LangGraph StateGraph, checkpointed by SqliteSaver or PostgresSaver.

``python -m killdrill.examples.settlement_langgraph --thread T --db PATH [--durability sync|async|exit]
[--naive] [--postgres URL]``

Five nodes: read_usage -> decide_amount -> charge_customer -> write_invoice -> send_receipt.
The node code carries no kill points: drill it with the LangGraph integration
(``killdrill drill --integration langgraph -- python -m killdrill.examples.settlement_langgraph ...``).

Resume is ``invoke(None, config)`` whenever the thread has a checkpoint: passing the input
again would start a new run on the thread and repeat every effect.  The run is finished only
when the state snapshot has neither ``next`` nor ``tasks``.

``--naive`` writes the effects as people first do: no idempotency key on the charge or the
invoice counter, the receipt sent straight away.  LangGraph re-runs a node whose writes were
not committed, so a kill between an effect and ``put_writes`` repeats it.  The default form
derives every key from what the action is (thread, node, account, billing cycle, and the
checkpointed amount), never from runtime position such as a task id, and sends the
irreversible receipt last, behind a gate that reconciles a claim left in flight with
``mailbox.lookup``.

SIGTERM asks LangGraph to drain (``RunControl.request_drain``): the graph stops at the next
superstep with its checkpoint saved and the process exits with status 75.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TypedDict

from killdrill.effects import ResultStore, gate, idempotency_key
from killdrill.fakes import Fakes, connect

EXIT_DRAINED = 75
"""EX_TEMPFAIL: the run stopped on request with its progress saved; resume it later."""

PRICE_CENTS_PER_UNIT = 7
# Usage the metering system reports, per account and billing cycle (a pure read: replays agree).
_USAGE = {"acct_42": [120, 80, 45, 300], "acct_7": [10, 20]}


class SettlementState(TypedDict, total=False):
    account: str
    cycle: str
    email: str
    usage_units: int
    amount: int
    charge_id: str
    invoice_id: str
    receipt_id: str


def build_graph(fakes: Fakes, thread: str, *, naive: bool, store: ResultStore | None) -> Any:
    """The StateGraph (uncompiled); effects close over ``fakes`` and the idempotency material."""
    from langgraph.graph import END, START, StateGraph

    def key(node: str, state: SettlementState, **extra: Any) -> str:
        payload = {"account": state["account"], "cycle": state["cycle"], **extra}
        return idempotency_key(thread, node, 0, payload)

    def read_usage(state: SettlementState) -> SettlementState:
        return {"usage_units": sum(_USAGE.get(state["account"], []))}

    def decide_amount(state: SettlementState) -> SettlementState:
        return {"amount": state["usage_units"] * PRICE_CENTS_PER_UNIT}

    def charge_customer(state: SettlementState) -> SettlementState:
        payload: dict[str, Any] = {
            "account": state["account"],
            "cycle": state["cycle"],
            "amount": state["amount"],
        }
        k = None if naive else key("charge_customer", state, amount=state["amount"])
        charge = fakes.payments.charge(idempotency_key=k, currency="usd", **payload)
        return {"charge_id": charge["id"]}

    def write_invoice(state: SettlementState) -> SettlementState:
        invoice_id = f"inv_{state['account']}_{state['cycle']}"
        # An idempotent write (converges on replay) plus a non-idempotent counter.
        fakes.kv.set(
            f"invoice/{invoice_id}",
            {"amount": state["amount"], "account": state["account"], "cycle": state["cycle"]},
        )
        k = None if naive else key("write_invoice", state)
        fakes.counter.increment("invoices_issued", idempotency_key=k)
        return {"invoice_id": invoice_id}

    def send_receipt(state: SettlementState) -> SettlementState:
        message = {
            "to": state["email"],
            "subject": f"Receipt for {state['cycle']}",
            "body": f"Charged {state['amount']} cents to {state['account']}, invoice {state['invoice_id']}.",
        }
        if naive or store is None:
            sent = fakes.mailbox.send(**message)
            return {"receipt_id": sent["id"]}
        k = key("send_receipt", state)
        sent = gate(
            store,
            k,
            lambda: fakes.mailbox.send(**message, ref=k),
            reconcile=fakes.mailbox.lookup,
            thread=thread,
            node="send_receipt",
            occurrence=0,
            payload={"account": state["account"], "cycle": state["cycle"]},
        )
        return {"receipt_id": sent.get("id", k) if isinstance(sent, dict) else k}

    graph = StateGraph(SettlementState)
    for name, fn in (
        ("read_usage", read_usage),
        ("decide_amount", decide_amount),
        ("charge_customer", charge_customer),
        ("write_invoice", write_invoice),
        ("send_receipt", send_receipt),
    ):
        graph.add_node(name, fn)
    graph.add_edge(START, "read_usage")
    graph.add_edge("read_usage", "decide_amount")
    graph.add_edge("decide_amount", "charge_customer")
    graph.add_edge("charge_customer", "write_invoice")
    graph.add_edge("write_invoice", "send_receipt")
    graph.add_edge("send_receipt", END)
    return graph


def psycopg_url(url: str) -> str:
    """``postgresql+psycopg://...`` (SQLAlchemy) -> ``postgresql://...`` (libpq, for psycopg)."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}" if sep else url


def sqlalchemy_url(url: str) -> str:
    """``postgresql://...`` -> ``postgresql+psycopg://...`` (psycopg 3 is what the extra installs)."""
    scheme, sep, rest = url.partition("://")
    return f"postgresql+psycopg://{rest}" if sep and scheme in ("postgres", "postgresql") else url


@contextlib.contextmanager
def open_checkpointer(
    db: str | None, postgres: str | None, *, naive: bool
) -> Iterator[tuple[Any, ResultStore | None]]:
    """The checkpointer and, in the correct form, the effect store next to it."""
    if postgres:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        # The connection PostgresSaver.from_conn_string would open, opened here to lock on it.
        with psycopg.connect(
            psycopg_url(postgres), autocommit=True, prepare_threshold=0, row_factory=dict_row
        ) as conn:
            saver = PostgresSaver(conn)
            # Several agents (xdist workers, resumers) may create the tables at once.
            conn.execute("SELECT pg_advisory_lock(7262011)")
            try:
                saver.setup()
                store = None if naive else ResultStore(sqlalchemy_url(postgres))
            finally:
                conn.execute("SELECT pg_advisory_unlock(7262011)")
            try:
                yield saver, store
            finally:
                if store is not None:
                    store.close()
        return
    if not db:
        raise SystemExit("settlement_langgraph: give --db PATH (SQLite) or --postgres URL")
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(db) as sqlite_saver:
        store = None if naive else ResultStore(f"{db}.effects")
        try:
            yield sqlite_saver, store
        finally:
            if store is not None:
                store.close()


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.settlement_langgraph")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--db", help="SQLite checkpoint file")
    parser.add_argument("--postgres", help="PostgreSQL URL: PostgresSaver instead of SqliteSaver")
    parser.add_argument("--durability", choices=("sync", "async", "exit"), default="sync")
    parser.add_argument("--naive", action="store_true", help="effects without keys, receipt ungated")
    parser.add_argument("--account", default="acct_42")
    parser.add_argument("--cycle", default="2026-05")
    args = parser.parse_args(argv)

    from langgraph.errors import GraphDrained
    from langgraph.runtime import RunControl

    control = RunControl()
    signal.signal(signal.SIGTERM, lambda signum, frame: control.request_drain("SIGTERM"))
    fakes = connect()
    config: Any = {"configurable": {"thread_id": args.thread}}
    with open_checkpointer(args.db, args.postgres, naive=args.naive) as (saver, store):
        app = build_graph(fakes, args.thread, naive=args.naive, store=store).compile(checkpointer=saver)
        started = saver.get_tuple(config) is not None
        inputs: SettlementState | None = (
            None
            if started
            else {"account": args.account, "cycle": args.cycle, "email": "billing@example.com"}
        )
        for _ in range(3):
            snapshot = app.get_state(config)
            if started and not (snapshot.next or snapshot.tasks):
                break
            try:
                app.invoke(inputs, config, durability=args.durability, control=control)
            except GraphDrained as exc:
                print(f"drained ({exc.reason}): resume with the same --thread", file=sys.stderr)
                return EXIT_DRAINED
            inputs, started = None, True
        else:
            print("settlement_langgraph: the run did not finish after 3 resumes", file=sys.stderr)
            return 1
        print(json.dumps(app.get_state(config).values, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(run())
