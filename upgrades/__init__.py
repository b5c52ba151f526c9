"""The upgrade tool: checks a candidate stack (a release, a wheel, a commit, a Neuron release
set; one or a matrix) against the trusted one with the suite's contracts, and writes the page
that says what changed, why, and how to promote it (docs/upgrade.md).

    python -m upgrades --candidate torch==2.15.0        (bash scripts/upgrade.sh does the same)

It sits above the session reports it reads (``reports``) and the harness (``fixtures``);
neither imports it.
"""
