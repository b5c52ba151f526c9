#!/usr/bin/env bash
# Install the suite into the ACTIVE Neuron environment (the venv or container python that
# already has the Neuron build of torch, torch-neuronx, neuronx-cc, nki, transformers and the
# TorchTitan Neuron fork): $VIRTUAL_ENV/bin/python, else python3 on PATH (PYTHON=... to choose).
#
#   bash scripts/install-trn2.sh
#
# Never touches torch, torch-neuronx, neuronx-cc, nki, transformers or torchtitan: the suite is
# installed --no-deps, and of its own pure-Python dependencies only the missing ones are
# installed, constrained to every version the environment already has; the run fails if any
# protected package changed anyway, or if pip check finds a new broken requirement.
set -euo pipefail
cd "$(dirname "$0")/.."
who=install-trn2; source scripts/active-python.sh
exec "$python" scripts/install_trn2.py
