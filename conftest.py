"""Wiring only: the suite's plugins live in fixtures/."""

import sys

from fixtures.launch.device_isolation import keep_device_backends_out

keep_device_backends_out()  # before anything imports torch: pytest never loads TorchNeuron

from fixtures.repo import WRITEUP_MODULES_DIR  # noqa: E402

# The write-up's kernel module is imported by its bare name, in the ranks and in-process.
sys.path.insert(0, str(WRITEUP_MODULES_DIR))

pytest_plugins = [
    "fixtures.session.launcher_options",
    "fixtures.session.plugin",
    "fixtures.session.expectations",
    "fixtures.session.run_fixtures",
    "fixtures.session.hypothesis_profiles",
    "reports.plugin",
    "fixtures.session.hygiene",
]
