"""An order service (``POST /orders``) that charges each order once, its idempotency records in
one JSON file on the machine it runs on, as a small service keeps them: a key is made for an
order and recorded before the charge, so a client's retry, or a retry after the service
restarted, charges with the same key and the payment provider replays it.

The records are written to a temporary file and put in place with ``os.replace``; correct, the
file is flushed and fsynced first and its directory fsynced after.  ``--bug no-fsync``: the same
without the two fsyncs, which survives every crash of the process (the kernel holds the write)
and not the machine's power loss: the service comes back with no record of the key it charged
with, and charges again under a new one.  Served by the standard library's ``http.server``.
"""

import argparse
import json
import os
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--records", required=True, help="the JSON file of idempotency records")
p.add_argument("--bug", choices=("no-fsync",), default=None)
args = p.parse_args()
payments = connect().payments
lock = threading.Lock()


def load() -> dict:
    try:
        with open(args.records) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):  # none yet, or torn: no records
        return {}


def save(records: dict) -> None:
    tmp = args.records + ".tmp"
    with open(tmp, "w") as f:
        json.dump(records, f)
        if args.bug is None:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, args.records)
    if args.bug is None:
        fd = os.open(os.path.dirname(os.path.abspath(args.records)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Orders(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        order = str(body["order"])
        with lock:
            records = load()
            record = records.get(order)
            if record is None:
                record = records[order] = {"key": f"order-{uuid.uuid4()}"}
                save(records)
            if "charge" not in record:
                charge = payments.charge(idempotency_key=record["key"], amount=body["amount"], customer=order)
                record["charge"] = charge["id"]
                save(records)
        data = json.dumps({"order": order, **record}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt: str, *a: object) -> None:
        sys.stderr.write(fmt % a + "\n")


server = ThreadingHTTPServer(("127.0.0.1", args.port), Orders)
print(f"serving on {args.port}", file=sys.stderr, flush=True)
server.serve_forever()
