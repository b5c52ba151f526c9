#!/usr/bin/env bash
# The trn2 upgrade, rehearsed on CPU (CI runs it; never trn2 evidence): a second, labelled
# stand-in Neuron release (neuron_standins/releases/rehearsal.2.json: neuronx-cc with one
# documented behaviour changed, the kernel's sequence-length message) is built as a wheel and
# checked by the same command a trn2 user runs (python -m upgrades --tier trn2 ...,
# --no-deps over a copy of the active environment) on the trn2 contracts that launch nothing.
# Passes when the page flags that one contract and nothing else changed.
#
#   bash scripts/rehearse-trn2-upgrade.sh [--rehearsal-host HOST] [--baseline-report DIR]
#
# --rehearsal-host: the host both sessions rehearse (neuron_standins/hosts/; default the
# suite's). --baseline-report: a rehearsal session of the same environment on the same host
# that ran at least this selection (scripts/selftest.sh passes the one it has just run), read
# as the trusted side instead of running the trusted session again.
set -euo pipefail
cd "$(dirname "$0")/.."
host=(); baseline=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rehearsal-host) host=(--rehearsal-host "$2"); shift 2 ;;
    --baseline-report) baseline=(--baseline-report "$2"); shift 2 ;;
    *) echo "rehearse-trn2-upgrade: unknown argument '$1' (--rehearsal-host HOST, --baseline-report DIR)" >&2; exit 2 ;;
  esac
done
venv=${VIRTUAL_ENV:-$PWD/.venv-rehearsal}
out=reports/out/upgrade-rehearsal
rm -rf "$out"
wheel=$("$venv/bin/python" scripts/build_standin_release.py neuron_standins/releases/rehearsal.2.json "$out/release")
status=0
"$venv/bin/python" -m upgrades --tier trn2 --trusted-venv "$venv" --candidate "$wheel" --no-deps \
  --out "$out" --performance-launches 0 "${baseline[@]}" \
  -- conformance -m "trn2 and not slow" --neuron-dress-rehearsal "${host[@]}" || status=$?
"$venv/bin/python" - "$out/upgrade.json" "$status" <<'PY'
import sys
from upgrades.result import UpgradeResult
result = UpgradeResult.read(sys.argv[1])
changed = {c.nodeid: c.category for c in result.comparison.contracts if c.category != "unchanged"}
want = {"conformance/test_rope.py::test_kernel_rejects_bad_seq_len_itself[trn2]": "newly failing"}
print(f"trn2 upgrade rehearsal: {result.verdict.text()}")
if changed != want or sys.argv[2] != "1":
    sys.exit(f"trn2 upgrade rehearsal: expected exactly {want} (upgrade exit 1), got {changed} (exit {sys.argv[2]})")
owners = [g.owner for g in result.comparison.groups]
if len(owners) != 1 or "suite" in owners[0]:
    sys.exit(f"trn2 upgrade rehearsal: the one cause must be the candidate's behaviour, got {owners}")
print("trn2 upgrade rehearsal: the changed stand-in behaviour was flagged, and only it")
PY
