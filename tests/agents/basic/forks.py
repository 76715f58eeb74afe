"""Forks; the child calls boundaries of its own on its own connection, then the parent goes on."""

import os

import killdrill

killdrill.boundary("before:parent")
pid = os.fork()
if pid == 0:
    killdrill.boundary("before:child")
    os._exit(0)
os.waitpid(pid, 0)
killdrill.boundary("after:parent")
