"""The agent's bootstrap: the directory the supervisor puts first on ``PYTHONPATH`` (its
``sitecustomize`` activates the integrations).  A package so the import contract checks it."""
