"""Wiring only: the suite's plugins live in fixtures/."""

pytest_plugins = [
    "fixtures.plugin",
    "fixtures.expectations",
    "fixtures.run_fixtures",
]
