"""Wiring only: the suite's plugins live in fixtures/."""

pytest_plugins = [
    "fixtures.plugin",
    "fixtures.expectations",
    "fixtures.run_fixtures",
    "fixtures.hypothesis_profiles",
    "reports.plugin",
    "fixtures.hygiene",
    "pytester",  # meta_tests drive the plugins in throw-away pytest sessions
]
