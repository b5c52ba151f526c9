"""Results, stack inventory, the version gate, repro bundles and committed baselines."""
