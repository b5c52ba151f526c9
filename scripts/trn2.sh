#!/usr/bin/env bash
# Run the trn2 tier in the ACTIVE Neuron environment (after scripts/install-trn2.sh): pytest -m
# trn2 with the model folder, the report in reports/out/trn2/ (report.json, junit.xml,
# summary.md, gate.txt), gated against the committed trn2 baseline of this stack when there is
# one (reports/baselines/<stack id>.json; nothing has run on Trainium yet, so none exists).
#
#   bash scripts/trn2.sh --model-dir DIR [pytest args]    (or QWEN3_4B_DIR=DIR bash scripts/trn2.sh; contracts
#                                                           named as conformance/... run alone, else all of them)
#   bash scripts/trn2.sh --neuron-dress-rehearsal          (the rehearsal: in .venv-rehearsal, on CPU
#                                                           stand-ins; its report goes to reports/out/rehearsal/)
set -euo pipefail
cd "$(dirname "$0")/.."
who=trn2; source scripts/active-python.sh
args=()
paths=()  # contracts named on the command line (a file or node id under conformance/): else all of them
out=reports/out/trn2
while [ $# -gt 0 ]; do
  case "$1" in
    conformance|conformance/*) paths+=("$1"); shift ;;
    --model-dir) args+=(--trn2-model-dir "$2"); shift 2 ;;
    --model-dir=*) args+=(--trn2-model-dir "${1#*=}"); shift ;;
    --neuron-dress-rehearsal) args+=("$1"); out=reports/out/rehearsal; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
[ ${#paths[@]} -gt 0 ] || paths=(conformance)
exec "$python" -m pytest "${paths[@]}" -m trn2 --report-dir "$out" --gate-baseline if-present "${args[@]}"
