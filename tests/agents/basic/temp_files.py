"""An agent that leaves temporary files as programs do when killed: multiprocessing's ``pymp-*``
folder, a ``mkstemp`` file and a ``mkdtemp`` folder, made before its one keyed charge; it says
where its temporary folder is in ``{workdir}/tmpdirs``."""

import argparse
import multiprocessing.util
import os
import tempfile

from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
p.add_argument("--workdir", required=True)
args = p.parse_args()

with open(os.path.join(args.workdir, "tmpdirs"), "a") as f:
    f.write(tempfile.gettempdir() + "\n")
multiprocessing.util.get_temp_dir()
os.close(tempfile.mkstemp(prefix="agent-")[0])
tempfile.mkdtemp(prefix="agent-")
connect().payments.charge(idempotency_key=f"{args.thread}:charge", amount=100, currency="usd")
