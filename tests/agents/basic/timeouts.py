"""A step with its own timeout (SIGALRM, 1 s) around a provider call, retried once on timeout.

Held at ``before:charge`` for longer than its timeout (``before:charge~3s``), the step times out,
retries with the same key, and the run must still charge exactly once.
"""

import argparse
import signal

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
args = p.parse_args()
fakes = connect()


def on_alarm(signum, frame):
    raise TimeoutError("charge step timed out")


signal.signal(signal.SIGALRM, on_alarm)
for attempt in range(3):
    signal.alarm(1)
    try:
        with killdrill.node("charge"):
            fakes.payments.charge(idempotency_key=f"{args.thread}:charge", amount=100, account="acme")
        signal.alarm(0)
        break
    except TimeoutError:
        print(f"timeout on try {attempt + 1}; retrying", flush=True)
