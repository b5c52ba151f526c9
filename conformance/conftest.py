"""Every contract runs once per selected tier, whether or not its body reads the tier profile."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _every_contract_runs_per_tier(tier):
    """Puts ``tier`` in every contract's fixtures, so ``fixtures.plugin`` parametrizes it."""
    return tier
