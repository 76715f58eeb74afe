"""Exits with the status given, after one boundary (a broken agent for discovery errors)."""

import sys

import killdrill

killdrill.boundary("before:work")
print("agent failed on purpose", file=sys.stderr)
sys.exit(int(sys.argv[1]))
