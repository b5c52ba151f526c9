#!/usr/bin/env bash
# Set up the venv of a CPU reference stack (if needed) and run the conformance suite on the
# cpu tier, gated against that stack's committed baseline (reports/baselines/<stack id>.json);
# writes the report to reports/out/cpu/ (report.json, junit.xml, summary.md, gate.txt).
#   CONFORMANCE_STACK=titan-5059f32 bash scripts/conformance.sh   # the fork's-vintage stack
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
stack=${CONFORMANCE_STACK:-titan-0.3.0}
venv=$(bash scripts/setup-venv.sh "$stack")
out=reports/out/cpu
if [ "$stack" != titan-0.3.0 ]; then out=reports/out/cpu-$stack; fi
exec "$venv/bin/python" -m pytest conformance -m cpu --report-dir "$out" --gate-baseline auto "$@"
