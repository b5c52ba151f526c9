#!/usr/bin/env bash
# The trn2 performance gate, rehearsed (REHEARSAL ONLY: CPU stand-ins, never trn2 evidence),
# with the command a trn2 user runs (python -m upgrades --tier trn2 ...) on the performance
# contracts, trusted and candidate sessions interleaved, on the default rehearsal host, with a
# history of its own ($out/history, not the committed one):
#   1. no A/A series of the host type is stored: the slower stand-in kernel release
#      (neuron_standins/releases/rehearsal.3-slow-kernel.json) gets FIGURES ONLY, no verdict,
#      its step time shown slower (the check stores its trusted sessions);
#   2. `python -m upgrades.perf_history record --tier trn2` adds sessions until the series has
#      the 6 thresholds are derived from (upgrades.perf_history.aa_policy);
#   3. the slower kernel again: SLOWER (exit 1), no contract changing outcome;
#   4. the installed release relabelled (rehearsal.aa-relabelled.json): PASS.
# About 20 sessions of a minute or two each on 2 cores, so not part of CI (scripts/selftest.sh);
# the pages go to reports/examples/ by hand.
#   bash scripts/rehearse-trn2-perf.sh [--performance-launches N]   (default 3 a side)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VIRTUAL_ENV:-$PWD/.venv-rehearsal}
out=reports/out/upgrade-rehearsal-perf
history="$out/history"
rm -rf "$out"
launches=(--performance-launches 3 "$@")
slow=$("$venv/bin/python" scripts/build_standin_release.py neuron_standins/releases/rehearsal.3-slow-kernel.json "$out/release")
same=$("$venv/bin/python" scripts/build_standin_release.py neuron_standins/releases/rehearsal.aa-relabelled.json "$out/release")
check() {  # check NAME WHEEL: the upgrade check of one stand-in release; its exit status is echoed
  local status=0
  "$venv/bin/python" -m upgrades --tier trn2 --trusted-venv "$venv" --candidate "$2" --no-deps \
    --out "$out/$1" --history "$history" "${launches[@]}" \
    -- conformance/test_performance.py -m trn2 --neuron-dress-rehearsal >&2 || status=$?
  echo "$status"
}
expect() {  # expect NAME STATUS PERF_VERDICT STATUS_WANTED: the page's verdict and nothing else changed
  "$venv/bin/python" - "$out/$1/upgrade.json" "$2" "$3" "$4" <<'PY'
import json, sys
path, status, want, want_status = sys.argv[1:]
result = json.load(open(path))
changed = {c["nodeid"]: c["category"] for c in result["contracts"] if c["category"] != "unchanged"}
perf = result["performance"]
print(f"trn2 performance rehearsal, {path}: {result['verdict']}")
for c in perf["comparisons"]:
    print(f"  {c['figure']}: {c['change']}{' (flagged)' if c['flagged'] else ''}")
step = next(c for c in perf["comparisons"] if c["figure"] == "step_time_s")
if changed or perf["verdict"] != want or status != want_status:
    sys.exit(f"expected no contract change, performance {want} and exit {want_status}; got {changed}, "
             f"{perf['verdict']} (exit {status})")
if want == "FIGURES ONLY" and step["ratio"] <= 1:
    sys.exit(f"FIGURES ONLY must still show the slower kernel: step time ratio {step['ratio']:.3f}")
PY
}
status=$(check figures-only "$slow"); expect figures-only "$status" "FIGURES ONLY" 0
"$venv/bin/python" -m upgrades.perf_history record --tier trn2 --launches 3 --history "$history" \
  --out "$out/record" -- --neuron-dress-rehearsal
status=$(check slower "$slow"); expect slower "$status" SLOWER 1
status=$(check a-a "$same"); expect a-a "$status" PASS 0
echo "trn2 performance rehearsal: figures only without an A/A series, SLOWER with one, PASS for the relabelled release"
