#!/usr/bin/env bash
# Set up .venv (if needed) and run the suite's own tests: meta_tests/ plus the cpu tier, then
# the Neuron dress rehearsal (the trn2 tier on CPU against stand-ins of the Neuron layer:
# CPU evidence only, never trn2 evidence). Extra arguments go to both pytest sessions.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh || exit $?
.venv/bin/python -m pytest meta_tests conformance -m "cpu or meta" --report-dir reports/out/selftest "$@"
first=$?
.venv/bin/python -m pytest conformance -m trn2 --neuron-dress-rehearsal --report-dir reports/out/rehearsal "$@"
second=$?
echo "selftest: cpu tier and meta tests exit ${first}; Neuron dress rehearsal exit ${second}"
if [ "$first" -ne 0 ]; then exit "$first"; fi
exit "$second"
