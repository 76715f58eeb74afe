"""The audit of issue-class guarantees a user can rerun: ``python -m tests.audit`` (see its help)."""
