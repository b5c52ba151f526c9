#!/usr/bin/env bash
# Set up .venv (if needed) and run the suite's own tests: meta_tests/ plus the cpu tier.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
exec .venv/bin/python -m pytest meta_tests conformance -m "cpu or meta" "$@"
