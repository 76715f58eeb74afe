"""Detection power of killdrill: a corpus of agents with one planted defect each, plus correct ones.

``python -m tests.detection`` prints the table (see ``run.py``); ``test_detection.py`` is the
CI-sized check of the same corpus.
"""
