#!/usr/bin/env bash
# Set up the venvs (if needed) and run the suite's own tests:
#   1. meta_tests/ plus the cpu tier on the reference stack (torchtitan 0.3.0, .venv);
#   2. the cpu tier on the fork's-vintage stack (torchtitan main at 5059f32c5,
#      .venv-titan-5059f32): every contract its expectations file names, the override and
#      versions areas, and one contract per other area (scripts/5059f32-sample.txt), against
#      that stack's expectations file;
#   3. the cpu tier on torchtitan main at b5bcd76c6 (.venv-titan-b5bcd76), a month past the
#      fork's vintage: one contract per area (scripts/b5bcd76-sample.txt) after the config
#      preflight, against that stack's own expectations file;
#   4. the Neuron dress rehearsal (the trn2 tier on CPU against stand-ins of the Neuron
#      layer: CPU evidence only, never trn2 evidence) in the rehearsal environment
#      (.venv-rehearsal), through the two commands a trn2 user runs: scripts/install-trn2.sh
#      and scripts/trn2.sh; then the trn2 upgrade rehearsed (scripts/rehearse-trn2-upgrade.sh:
#      a labelled stand-in Neuron release changing one kernel message must be flagged alone).
# Extra arguments go to every pytest session. Exits with the first non-zero status.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=$(bash scripts/setup-venv.sh titan-0.3.0) || exit $?
fork_venv=$(bash scripts/setup-venv.sh titan-5059f32) || exit $?
newer_venv=$(bash scripts/setup-venv.sh titan-b5bcd76) || exit $?
rehearsal_venv=$(bash scripts/setup-venv.sh rehearsal) || exit $?
echo "selftest: venvs ready after ${SECONDS} s"
"$venv/bin/python" -m pytest meta_tests conformance -m "cpu or meta" --report-dir reports/out/selftest "$@"
first=$?
echo "selftest: meta tests and the cpu tier (torchtitan 0.3.0) done after ${SECONDS} s"
# shellcheck disable=SC2046
"$fork_venv/bin/python" -m pytest $(grep -v '^#' scripts/5059f32-sample.txt) -m cpu \
  --report-dir reports/out/selftest-titan-5059f32 "$@"
second=$?
echo "selftest: the 5059f32c5 sample done after ${SECONDS} s"
# shellcheck disable=SC2046
"$newer_venv/bin/python" -m pytest $(grep -v '^#' scripts/b5bcd76-sample.txt) -m cpu \
  --report-dir reports/out/selftest-titan-b5bcd76 "$@"
newer=$?
echo "selftest: the b5bcd76c6 sample done after ${SECONDS} s"
(
  export VIRTUAL_ENV="$PWD/$rehearsal_venv" PATH="$PWD/$rehearsal_venv/bin:$PATH"
  bash scripts/install-trn2.sh && bash scripts/trn2.sh --neuron-dress-rehearsal "$@" &&
    bash scripts/rehearse-trn2-upgrade.sh
)
third=$?
echo "selftest: the rehearsal and the trn2 upgrade rehearsal done after ${SECONDS} s"
echo "selftest: cpu tier and meta tests exit ${first}; the 5059f32c5 sample exit ${second};" \
     "one contract per area on torchtitan b5bcd76c6 exit ${newer}; Neuron dress rehearsal and trn2 upgrade" \
     "rehearsal exit ${third}"
for status in "$first" "$second" "$newer" "$third"; do
  if [ "$status" -ne 0 ]; then exit "$status"; fi
done
exit 0
