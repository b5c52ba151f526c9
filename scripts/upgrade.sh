#!/usr/bin/env bash
# Before an upgrade: build the candidate stack beside the trusted one, run the cpu tier there,
# compare with the trusted stack's baseline. Arguments go to `python -m upgrades`:
#   bash scripts/upgrade.sh --candidate transformers==5.24.0 [--candidate PKG==VER ...] [--bisect]
set -euo pipefail
cd "$(dirname "$0")/.."
stack=titan-0.3.0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[$i]}" = "--stack" ]; then stack=${args[$((i + 1))]}; fi
done
venv=$(bash scripts/setup-venv.sh "$stack")
exec "$venv/bin/python" -m upgrades "$@"
