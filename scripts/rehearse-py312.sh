#!/usr/bin/env bash
# The Neuron dress rehearsal's cheap contracts on CPython 3.12, the TorchNeuron beta's Python
# (the DLAMIs' and containers'): every trn2 contract that launches no torchrun run
# (-m 'trn2 and not slow': topology, versions, overrides, the RoPE kernel, the MoE conversions),
# in .venv-rehearsal-py312 (`bash scripts/setup-venv.sh rehearsal-py312`: the reference stack
# built from nothing on 3.12 with the 3.11 stack's pins and constraints, plus the stand-ins),
# through the two commands a trn2 user runs (install-trn2.sh, trn2.sh). Its report goes to
# reports/out/rehearsal-py312/. CPU evidence only, never trn2 evidence.
#
#   bash scripts/rehearse-py312.sh [REHEARSAL_HOST [pytest args]]   (default host eks-pod-two-cores)
#
# Fails if the session fails, or if the run cache recorded a launch during it: `slow` marks
# every contract that launches (pyproject's markers), so a launch here is a marker missing.
set -uo pipefail
cd "$(dirname "$0")/.."
host=${1:-eks-pod-two-cores}
[ $# -gt 0 ] && shift
venv=$(bash scripts/setup-venv.sh rehearsal-py312) || {
  echo "rehearse-py312: building the Python 3.12 rehearsal venv failed (above)" >&2; exit 1; }
cache=.cache/conformance  # the session's run cache (--conformance-cache, if given, wins as in pytest)
prev=""; for arg in "$@"; do
  case "$arg" in --conformance-cache=*) cache=${arg#*=} ;; esac
  if [ "$prev" = --conformance-cache ]; then cache=$arg; fi; prev=$arg
done
launches=$cache/runs/launches.jsonl
before=$(cat "$launches" 2>/dev/null | wc -l)
export VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH"
echo "rehearse-py312: $("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])') in $venv, host $host" >&2
bash scripts/install-trn2.sh || exit $?
bash scripts/trn2.sh --neuron-dress-rehearsal --rehearsal-host "$host" -m "trn2 and not slow" \
  --report-dir reports/out/rehearsal-py312 "$@"
status=$?
after=$(cat "$launches" 2>/dev/null | wc -l)
if [ "$after" -ne "$before" ]; then
  echo "rehearse-py312: contract: -m 'trn2 and not slow' launches no run; expected: no new line in $launches;" \
       "actual: $((after - before)) new (below); culprit: a launching contract without the slow marker" >&2
  tail -n "$((after - before))" "$launches" | cut -c1-300 >&2
  exit 1
fi
exit "$status"
