#!/usr/bin/env bash
# The trn2 performance gate, rehearsed (REHEARSAL ONLY: CPU stand-ins, never trn2 evidence):
# a labelled stand-in Neuron release whose RoPE kernel is slower and computes the same values
# (neuron_standins/releases/rehearsal.3-slow-kernel.json) is checked with the command a trn2
# user runs (python -m upgrades --tier trn2 ...) on the performance contracts, with
# the trusted and candidate performance sessions interleaved. It passes only when no contract
# changes outcome and the performance verdict is SLOWER. About 8 minutes on 2 cores, so not
# part of CI (scripts/selftest.sh); its last page is reports/examples/.
#   bash scripts/rehearse-trn2-perf.sh [--performance-launches N]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VIRTUAL_ENV:-$PWD/.venv-rehearsal}
out=reports/out/upgrade-rehearsal-perf
rm -rf "$out"
wheel=$("$venv/bin/python" scripts/build_standin_release.py neuron_standins/releases/rehearsal.3-slow-kernel.json "$out/release")
status=0
"$venv/bin/python" -m upgrades --tier trn2 --trusted-venv "$venv" --candidate "$wheel" --no-deps \
  --out "$out" --performance-launches 3 "$@" -- conformance/test_performance.py -m trn2 --neuron-dress-rehearsal || status=$?
"$venv/bin/python" - "$out/upgrade.json" "$status" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
changed = {c["nodeid"]: c["category"] for c in result["contracts"] if c["category"] != "unchanged"}
perf = result["performance"]
print(f"trn2 performance rehearsal: {result['verdict']}")
for c in perf["comparisons"]:
    print(f"  {c['figure']}: {c['change']}{' (flagged)' if c['flagged'] else ''}")
if changed or perf["verdict"] != "SLOWER" or sys.argv[2] != "1":
    sys.exit(f"trn2 performance rehearsal: expected no contract change and SLOWER (upgrade exit 1), got "
             f"{changed}, {perf['verdict']} (exit {sys.argv[2]})")
print("trn2 performance rehearsal: the slower stand-in kernel was flagged SLOWER, and nothing else changed")
PY
