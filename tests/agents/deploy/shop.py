"""An HTTP order service (``POST /orders``) that charges each order once, a service to drill
behind its client; ``--bug nokey`` charges without a key (a restart re-charges the order).

The order's state lives in ``--state`` (a JSON file per order): the charge's result is recorded
after the charge, so a process killed between the two charges again on the client's retry.
"""

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--state", required=True)
p.add_argument("--bug", default="")
args = p.parse_args()
os.makedirs(args.state, exist_ok=True)
fakes = connect()


class Orders(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        order = str(body["order"])
        path = os.path.join(args.state, f"{order}.json")
        if os.path.exists(path):
            with open(path) as f:
                result = json.load(f)
        else:
            with killdrill.node("charge"):
                key = None if args.bug == "nokey" else f"order:{order}"
                charge = fakes.payments.charge(idempotency_key=key, amount=body["amount"], account=order)
            result = {"order": order, "charge": charge["id"]}
            with open(path + ".tmp", "w") as f:
                json.dump(result, f)
            os.replace(path + ".tmp", path)
        data = json.dumps(result).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt: str, *a: object) -> None:
        sys.stderr.write(fmt % a + "\n")


server = ThreadingHTTPServer(("127.0.0.1", args.port), Orders)
print(f"serving on {args.port}", file=sys.stderr, flush=True)
server.serve_forever()
