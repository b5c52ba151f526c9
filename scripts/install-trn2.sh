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
python=${PYTHON:-${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}}
python=${python:-python3}
# The suite's Python (pyproject requires-python; meta_tests/test_install_trn2.py checks both
# say the same): asked before install_trn2.py runs, which an older one cannot even parse.
command -v "$python" > /dev/null || { echo "install-trn2: no python at '$python' (activate the Neuron environment, or set PYTHON=)" >&2; exit 2; }
if ! version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2]); sys.exit(sys.version_info < (3, 11))'); then
  echo "install-trn2: $python is Python ${version:-of an unknown version}; the suite needs Python >= 3.11" \
       "(Neuron's DLAMIs and containers run 3.12): activate that environment, or set PYTHON=" >&2
  exit 2
fi
exec "$python" scripts/install_trn2.py
