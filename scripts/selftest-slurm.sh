#!/usr/bin/env bash
# The Slurm back end on a real Slurm (Debian's slurm-wlm and munge; never stand-ins): a private
# controller and two nodes on this machine (scripts/slurm-local-cluster.sh), then
#   1. the cpu tier's two-node contracts with --launcher slurm (each launch one sbatch job, one
#      torchrun agent per node; --fresh-runs: launched through Slurm in this session), and the
#      clean exit of that run;
#   2. the Slurm back end's meta tests (meta_tests/test_slurm_backend.py: a node whose job step is
#      killed mid-run, a job Slurm cancels, a hung launch, a node that cannot see the shared folder,
#      arguments with spaces and globs, several agents a node);
#   3. with REHEARSAL_VENV set, the trn2 tier's two-node contracts in the Neuron dress rehearsal
#      (CPU stand-ins: CPU evidence only) through the same cluster, on the host REHEARSAL_HOST;
# and the cluster stopped, nothing of it left running. Without Slurm installed this fails saying
# how to install it (a skipped stage would be a silent green).
#
#   bash scripts/selftest-slurm.sh VENV [pytest args]
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${1:?usage: bash scripts/selftest-slurm.sh VENV [pytest args]}
shift
for tool in slurmctld slurmd munged sbatch srun scontrol; do
  if ! command -v "$tool" > /dev/null && [ ! -x "/usr/sbin/$tool" ]; then
    echo "selftest: the Slurm stage needs Slurm and munge, and $tool is missing: as root," \
         "apt-get update && apt-get install -y slurm-wlm munge (.ci/run does this on a fresh machine)" >&2
    exit 3
  fi
done
dir=$(mktemp -d /tmp/conformance-slurm.XXXXXX)  # munge's socket path must stay under 108 bytes
trap 'bash scripts/slurm-local-cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
conf=$(bash scripts/slurm-local-cluster.sh start "$dir") || exit 1
eval "$conf"  # export SLURM_CONF=...
"$venv/bin/python" -m pytest conformance -m cpu -k two_nodes --launcher slurm --fresh-runs \
  --report-dir reports/out/selftest-slurm "$@"
contracts=$?
"$venv/bin/python" -m pytest meta_tests -m "meta and slurm" --report-dir reports/out/selftest-slurm-meta "$@"
meta=$?
rehearsal=0
if [ -n "${REHEARSAL_VENV:-}" ]; then
  "$REHEARSAL_VENV/bin/python" -m pytest conformance -m trn2 -k two_nodes --neuron-dress-rehearsal \
    --rehearsal-host "${REHEARSAL_HOST:-eks-pod-two-cores}" --launcher slurm --fresh-runs \
    --report-dir reports/out/selftest-slurm-rehearsal "$@"
  rehearsal=$?
fi
echo "selftest: the Slurm stage: two-node contracts through Slurm exit $contracts; Slurm back end meta tests exit" \
     "$meta; the rehearsal's two-node contracts through Slurm exit $rehearsal"
for status in "$contracts" "$meta" "$rehearsal"; do
  if [ "$status" -ne 0 ]; then exit "$status"; fi
done
exit 0
