"""The meta tests' own wiring: pytest's ``pytester`` plugin, which only they use (to drive the
suite's plugins in throw-away sessions), is loaded where they are collected, not in every
session of the suite (``conftest.py`` at the root lists the production plugins alone)."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


# The files that start pytest sessions, launches or venv builds, longest first (seconds one
# after another in CI: 237, 159, 147, 75, 61, 51, 49, 33). Under ``-n 2 --dist loadfile``
# (scripts/selftest.sh) a worker takes the next file in collection order when it is free: the
# long ones go first so the two workers end together, not one starting a long file last. Only
# the order changes; a stale list costs time, never a test.
LONGEST_FIRST = ("test_sessions.py", "test_rehearsal_hosts.py", "test_upgrade.py", "test_rehearsal_device.py",
                 "test_install_trn2.py", "test_stack_preflight.py", "test_launcher.py", "test_rehearsal.py")


@pytest.hookimpl(trylast=True)  # after the plugin's cheap-first order, which it overrides for these files
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)) if "meta_tests" in item.path.parts else len(rank))
