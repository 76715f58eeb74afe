"""Small agents with one behaviour each, used by the harness's own tests."""
