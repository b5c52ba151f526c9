"""Every contract runs once per selected tier, whether or not its body reads the tier profile.

In the contract files, torchtitan's modules (and the suite's that import them) are imported
inside the contracts that use them, never at the top: on a stack lacking one, those
contracts fail naming it, and the rest of the file still collects and runs.
"""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _every_contract_runs_per_tier(tier):
    """Puts ``tier`` in every contract's fixtures, so ``fixtures.session.plugin`` parametrizes it."""
    return tier
