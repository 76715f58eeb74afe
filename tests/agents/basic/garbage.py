"""Abuses the control channel: ``foreign`` connects without the token, ``garbage`` sends junk."""

import os
import socket
import sys

import killdrill

mode = sys.argv[1]
killdrill.boundary("before:start")
if os.environ.get("KILLDRILL_CONTROL"):
    addr = os.environ["KILLDRILL_CONTROL"]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + addr[1:] if addr.startswith("@") else addr)
    if mode == "foreign":
        s.sendall(b'{"token": "guess"}\n')
    else:
        token = os.environ["KILLDRILL_CONTROL_TOKEN"]
        s.sendall(b'{"token": "' + token.encode() + b'"}\nthis is not json\n')
    print("reply:", s.recv(1000), file=sys.stderr)
    s.close()
killdrill.boundary("after:start")
