#!/usr/bin/env bash
# Create .venv at the repository root and install the pinned CPU reference stack.
# Idempotent: does nothing when .venv already matches pyproject.toml and the constraints.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is needed, found " + sys.version.split()[0])'
want=$(cat pyproject.toml requirements/cpu-constraints.txt | sha256sum | cut -c1-16)
if [ -f .venv/.installed ] && [ "$(cat .venv/.installed)" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
# torch 2.14.1 first: a CUDA build that runs without a GPU; on these machines pip takes it
# (and the nvidia wheels) from local disk. The constraints pin every transitive package.
"${pip[@]}" -c requirements/cpu-constraints.txt torch==2.14.1 nvidia-nvjitlink cuda-pathfinder
"${pip[@]}" -c requirements/cpu-constraints.txt -e ".[cpu]"
.venv/bin/python -m pip check
echo "$want" > .venv/.installed
