"""The functional API: an ``@entrypoint`` that calls two ``@task``s, checkpointed by SqliteSaver.

``python lg_functional.py --thread T --workdir W``

On resume the entrypoint runs again from its top (that is how the functional API resumes) and
every task already done returns its saved result without running: a correct agent whose
re-entry at the first boundary repeats nothing.
"""

from __future__ import annotations

import argparse

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.func import entrypoint, task

from killdrill.fakes import connect


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    fakes = connect(thread=args.thread)

    @task
    def charge(amount: int) -> str:
        key = f"{args.thread}:charge"
        return fakes.payments.charge(idempotency_key=key, account="acct_fn", amount=amount)["id"]

    @task
    def notify(charge_id: str) -> str:
        return fakes.webhooks.post(idempotency_key=f"{args.thread}:notify", charge=charge_id)["id"]

    with SqliteSaver.from_conn_string(f"{args.workdir}/ckpt.sqlite") as saver:

        @entrypoint(checkpointer=saver)
        def settle(amount: int) -> str:
            return notify(charge(amount).result()).result()

        config = {"configurable": {"thread_id": args.thread}}
        resume = settle.get_state(config).created_at is not None
        settle.invoke(None if resume else 4200, config, durability="sync")


if __name__ == "__main__":
    main()
