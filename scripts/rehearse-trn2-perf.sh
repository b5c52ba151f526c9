#!/usr/bin/env bash
# The trn2 performance gate, rehearsed (REHEARSAL ONLY: CPU stand-ins, never trn2 evidence),
# with the command a trn2 user runs (python -m upgrades --tier trn2 ...) on the performance
# contracts (trusted and candidate sessions interleaved, each on a cold compile cache of its
# own, then one warm session a stack), on REHEARSAL_HOST (default the EKS pod host: 2 ranks),
# with a history of its own ($out/history, not the committed one):
#   1. no A/A series of the host type is stored yet: the stand-in release relabelled
#      (neuron_standins/releases/rehearsal.aa-relabelled.json) gets FIGURES ONLY, no verdict
#      (the check stores its trusted sessions);
#   2. `python -m upgrades.perf_history record --tier trn2` adds sessions until the series has
#      the 6 the thresholds are derived from (upgrades.perf_history.aa_policy);
#   3. with thresholds from that series, no contract changing outcome in any check:
#      the relabelled release PASS; the slower kernel (rehearsal.3) SLOWER; 3 GiB more
#      scratchpad per core outside the allocator (rehearsal.4) LARGER; a slower compiler
#      (rehearsal.5) SLOWER COMPILE.
# About 45 sessions of half a minute each on 2 cores, so not part of CI (scripts/selftest.sh).
#   bash scripts/rehearse-trn2-perf.sh [--performance-launches N] [only CHECK ...]
# "only a-a slower" runs those checks of step 3 (after steps 1 and 2).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VIRTUAL_ENV:-$PWD/.venv-rehearsal}
host=${REHEARSAL_HOST:-eks-pod-two-cores}
out=reports/out/upgrade-rehearsal-perf
history="$out/history"
launches=(--performance-launches 3)
if [ "${1:-}" = "--performance-launches" ]; then launches=(--performance-launches "$2"); shift 2; fi
checks=(a-a slower larger compiler)
if [ "${1:-}" = "only" ]; then shift; checks=("$@"); fi
rm -rf "$out"
declare -A release=([a-a]=rehearsal.aa-relabelled [slower]=rehearsal.3-slow-kernel
                    [larger]=rehearsal.4-more-scratchpad [compiler]=rehearsal.5-slow-compiler)
declare -A wanted=([a-a]=PASS [slower]=SLOWER [larger]=LARGER [compiler]="SLOWER COMPILE")
wheel() { "$venv/bin/python" scripts/build_standin_release.py "neuron_standins/releases/$1.json" "$out/release"; }
check() {  # check NAME WHEEL [BASELINE_DIR]: one upgrade check of a stand-in release; echoes its exit status
  local status=0 baseline=()
  [ -n "${3:-}" ] && baseline=(--baseline-report "$3")
  "$venv/bin/python" -m upgrades --tier trn2 --trusted-venv "$venv" --candidate "$2" --no-deps \
    --out "$out/$1" --history "$history" "${launches[@]}" "${baseline[@]}" \
    -- conformance/test_performance.py -m trn2 --neuron-dress-rehearsal --rehearsal-host "$host" >&2 || status=$?
  echo "$status"
}
expect() {  # expect NAME STATUS FINDING: the finding in the verdict (PASS: alone) and no contract changed
  "$venv/bin/python" - "$out/$1/upgrade.json" "$2" "$3" <<'PY'
import sys
from upgrades.result import UpgradeResult
from upgrades.verdict import Finding
path, status, want = sys.argv[1:]
result = UpgradeResult.read(path)
changed = {c.nodeid: c.category for c in result.comparison.contracts if c.category != "unchanged"}
perf = result.performance.verdict
print(f"trn2 performance rehearsal, {path}: {result.verdict.text()}")
for c in perf.comparisons:
    print(f"  {c.figure}: {c.change()}{' (flagged)' if c.flagged else ''}")
found = perf.findings
ok = found == (Finding(want),) if want in ("PASS", "FIGURES ONLY") else Finding(want) in found
if changed or not ok or (status == "0") != perf.passed:
    sys.exit(f"expected no contract change and performance {want}; got {changed}, {perf.label} (exit {status})")
PY
}
status=$(check figures-only "$(wheel rehearsal.aa-relabelled)"); expect figures-only "$status" "FIGURES ONLY"
"$venv/bin/python" -m upgrades.perf_history record --tier trn2 --launches 3 --history "$history" \
  --out "$out/record" -- --neuron-dress-rehearsal --rehearsal-host "$host"
for name in "${checks[@]}"; do
  status=$(check "$name" "$(wheel "${release[$name]}")" "$out/figures-only/trusted-suite")
  expect "$name" "$status" "${wanted[$name]}"
done
echo "trn2 performance rehearsal: FIGURES ONLY without an A/A series; then each of ${checks[*]} as expected"
