"""Preloaded in a fork template: looks its temporary folder up at import, as many libraries do
(``tempfile`` keeps the first it finds)."""

import tempfile

tempfile.gettempdir()
