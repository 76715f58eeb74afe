"""Speed of killdrill, measured side by side in one run: ``python -m tests.benchmarks``.

Not collected by pytest (no ``test_`` files): figures, not assertions.
"""
