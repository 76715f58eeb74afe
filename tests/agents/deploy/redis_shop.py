"""The order service of ``shop.py`` keeping its orders in Redis (``--redis PORT``), as services
that need their database do: it pings Redis once at start and exits when nothing answers there
(its client set to no retry: its process manager is expected to start it after Redis is up).
A request that meets Redis down fails (the client retries it); the charge's key makes the retry
replay it."""

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--redis", type=int, required=True)
args = p.parse_args()
db = redis.Redis(host="127.0.0.1", port=args.redis, retry=Retry(NoBackoff(), 0))
db.ping()  # nothing listening: ConnectionError, the service exits 1 (no retry)
fakes = connect()


class Orders(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        order = str(body["order"])
        stored = db.get(f"order:{order}")
        if stored is not None:
            result = json.loads(stored)
        else:
            with killdrill.node("charge"):
                charge = fakes.payments.charge(
                    idempotency_key=f"order:{order}", amount=body["amount"], account=order
                )
            result = {"order": order, "charge": charge["id"]}
            db.set(f"order:{order}", json.dumps(result))
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
