"""The meta tests' own wiring: pytest's ``pytester`` plugin, which only they use (to drive the
suite's plugins in throw-away sessions), is loaded where they are collected, not in every
session of the suite (``conftest.py`` at the root lists the production plugins alone)."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")
