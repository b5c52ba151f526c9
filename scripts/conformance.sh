#!/usr/bin/env bash
# Set up .venv (if needed) and run the conformance suite on the cpu tier; writes the report
# to reports/out/cpu/ (report.json, junit.xml, summary.md). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
exec .venv/bin/python -m pytest conformance -m cpu --report-dir reports/out/cpu \
  --gate-baseline reports/baselines/cpu-torch2.14-titan0.3.json "$@"
