#!/usr/bin/env bash
# Set up the venvs (if needed) and run the suite's own tests:
#   1. meta_tests/ but the Slurm back end's (two xdist workers, one test file each at a time; among them the trn2
#      install on Python 3.12, online then offline, meta_tests/test_install_trn2.py, about
#      45 s, and a native and an hf_backend launch on the rehearsal host pod-with-neighbour,
#      meta_tests/test_rehearsal_hosts.py, about 60 s), then the cpu tier on
#      the reference stack (torchtitan 0.3.0, .venv) alone on the machine, then the Slurm stage
#      (scripts/selftest-slurm.sh: a private Slurm of two nodes on this machine, the cpu tier's
#      two-node contracts through it and the Slurm back end's meta tests, about 2.5 minutes; it
#      fails, saying how to install them, where slurm-wlm and munge are missing: .ci/run installs
#      them);
#   2. the cpu tier on the fork's-vintage stack (torchtitan main at 5059f32c5,
#      .venv-titan-5059f32): every contract its expectations file names, the override and
#      versions areas, and one contract per other area (scripts/5059f32-sample.txt), against
#      that stack's expectations file;
#   3. the cpu tier on torchtitan main at b5bcd76c6 (.venv-titan-b5bcd76), a month past the
#      fork's vintage: one contract per area (scripts/b5bcd76-sample.txt) after the config
#      preflight, against that stack's own expectations file; then the machine matrix: the
#      contracts comparing two computations equal in exact arithmetic only
#      (scripts/exactness-sample.txt) on the reference stack under another CPU kernel path;
#   4. the Neuron dress rehearsal (the trn2 tier on CPU against stand-ins of the Neuron layer: CPU
#      evidence only, never trn2 evidence), on the host REHEARSAL_HOST (default: an EKS pod given
#      two NeuronCores), whole on the stack trn2 users run, the Neuron fork's vintage (torchtitan
#      upstream main at 5059f32c5, .venv-rehearsal-5059f32, built beside the meta tests), through
#      the two commands a trn2 user runs: scripts/install-trn2.sh and scripts/trn2.sh; then the trn2
#      upgrade rehearsed (scripts/rehearse-trn2-upgrade.sh: a labelled stand-in Neuron release
#      changing one kernel message must be flagged alone), against the session just run as the
#      trusted one; then a sample on torchtitan 0.3.0 (.venv-rehearsal; scripts/rehearsal-030-sample.txt:
#      every strict xfail of its expectations file and every training path once);
#   5. the rehearsal's cheap contracts (-m 'trn2 and not slow': the topology, versions, override,
#      RoPE kernel and MoE-conversion contracts, none launching a run) on CPython 3.12, the
#      TorchNeuron beta's Python, in .venv-rehearsal-py312 (the reference stack built from
#      nothing on 3.12 with the same pins and constraints, plus the stand-ins; built beside the
#      meta tests), through install-trn2.sh and trn2.sh; a run recorded as launched fails it.
# Extra arguments go to every pytest session. Exits with the first non-zero status.
set -uo pipefail
cd "$(dirname "$0")/.."
# The rehearsal's host in CI: an EKS pod given two NeuronCores (neuron_standins/hosts/): two
# ranks on this 2-core machine; every host of the matrix still plans and runs its topology
# contracts (meta_tests/test_rehearsal_hosts.py). Users' default is trn2.3xlarge (4 ranks).
REHEARSAL_HOST=${REHEARSAL_HOST:-eks-pod-two-cores}
venv=$(bash scripts/setup-venv.sh titan-0.3.0) || exit $?
# The two torchtitan-main venvs (hard-link clones of the reference venv plus one wheel each)
# are built beside the rehearsal venv (whose build is mostly one compiler process) and the
# meta tests: neither uses them, and the cpu tier's launches, whose timings the performance
# contracts read, start only once they are built.
mkdir -p reports/out
( bash scripts/setup-venv.sh titan-5059f32 > reports/out/selftest-venv-5059f32.path &&
  bash scripts/setup-venv.sh titan-b5bcd76 > reports/out/selftest-venv-b5bcd76.path &&
  bash scripts/setup-venv.sh rehearsal-5059f32 > reports/out/selftest-venv-rehearsal-5059f32.path ) \
  2> reports/out/selftest-venvs.log &
more_venvs=$!
rehearsal_venv=$(bash scripts/setup-venv.sh rehearsal) || { status=$?; wait "$more_venvs"; exit "$status"; }
echo "selftest: the reference and rehearsal venvs ready after ${SECONDS} s"
# The 3.12 rehearsal venv is built beside the meta tests too, once the 3.11 one is (both compile
# the stand-ins in their source folders); step 5 asks for it again, which reports a failed build.
( bash scripts/setup-venv.sh rehearsal-py312 > /dev/null ) 2> reports/out/selftest-venv-py312.log &
py312_venv_build=$!
# The meta tests run two files at a time: most of their time is spent waiting on the
# sessions and launches they start (meta_tests/test_sessions.py attributes each file a
# session writes to that session, so a concurrent writer is not counted as its own).
"$venv/bin/python" -m pytest meta_tests -m "meta and not slurm" -n 2 --dist loadfile --report-dir reports/out/selftest-meta "$@"
meta=$?
echo "selftest: meta tests done after ${SECONDS} s"
if ! wait "$more_venvs"; then
  cat reports/out/selftest-venvs.log >&2
  echo "selftest: building the torchtitan-main venvs failed (above)" >&2
  exit 1
fi
wait "$py312_venv_build"  # its status: step 5 (the cpu tier's timings are taken with no build running)
echo "selftest: the Python 3.12 rehearsal venv built (or failed: step 5 says) after ${SECONDS} s"
"$venv/bin/python" -m pytest conformance -m cpu --report-dir reports/out/selftest "$@"
first=$?
echo "selftest: the cpu tier (torchtitan 0.3.0) done after ${SECONDS} s"
# The Slurm stage: the cpu tier's two-node contracts through a real Slurm started here (a
# controller and two nodes on this machine), the Slurm back end's meta tests, the cluster stopped.
# (SELFTEST_SLURM_REHEARSAL=1 adds the rehearsal's trn2 two-node contracts through it: about 65 s more)
if [ "${SELFTEST_SLURM_REHEARSAL:-0}" = 1 ]; then export REHEARSAL_VENV="$PWD/$rehearsal_venv" REHEARSAL_HOST; fi
bash scripts/selftest-slurm.sh "$venv" "$@"
slurm=$?
echo "selftest: the Slurm stage done after ${SECONDS} s"
fork_venv=$(cat reports/out/selftest-venv-5059f32.path)
newer_venv=$(cat reports/out/selftest-venv-b5bcd76.path)
echo "selftest: the torchtitan-main venvs ready ($fork_venv, $newer_venv)"
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
# The machine matrix beside the host matrix: the contracts that compare two computations equal
# in exact arithmetic only (scripts/exactness-sample.txt), again under another machine's CPU
# kernel paths (ATEN_CPU_CAPABILITY: AVX2, or the portable DEFAULT where AVX2 is this machine's
# own); the kernel path keys every run, so they launch their own runs.
own=$("$venv/bin/python" -c "import torch; print(torch.backends.cpu.get_cpu_capability())")
other=avx2; if [ "$own" = AVX2 ]; then other=default; fi
# shellcheck disable=SC2046
ATEN_CPU_CAPABILITY=$other "$venv/bin/python" -m pytest $(grep -v '^#' scripts/exactness-sample.txt) -m cpu \
  --report-dir "reports/out/selftest-$other" "$@"
matrix=$?
echo "selftest: the exactness contracts under ATEN_CPU_CAPABILITY=$other (this machine's own: $own) done after ${SECONDS} s"
# The rehearsal of the stack trn2 users run, the Neuron fork's vintage (torchtitan upstream main at
# 5059f32c5, .venv-rehearsal-5059f32), whole, through the two commands a trn2 user runs; on this
# host its trainer (neuron:LOCAL_RANK) gets one torchrun agent per rank
# (fixtures/tiers/core_pinning.py); then the trn2 upgrade rehearsed over it.
fork_rehearsal_venv=$(cat reports/out/selftest-venv-rehearsal-5059f32.path)
(
  export VIRTUAL_ENV="$PWD/$fork_rehearsal_venv" PATH="$PWD/$fork_rehearsal_venv/bin:$PATH"
  bash scripts/install-trn2.sh && bash scripts/trn2.sh --neuron-dress-rehearsal --rehearsal-host "$REHEARSAL_HOST" "$@" &&
    bash scripts/rehearse-trn2-upgrade.sh --rehearsal-host "$REHEARSAL_HOST" --baseline-report reports/out/rehearsal
)
third=$?
echo "selftest: the rehearsal on the fork's vintage (5059f32c5) and the trn2 upgrade rehearsal done after ${SECONDS} s"
# The rehearsal on torchtitan 0.3.0 (.venv-rehearsal: upstream's newest release, which no trn2 user
# runs), a sample (scripts/rehearsal-030-sample.txt): every strict xfail of its expectations file
# and every training path once; its report goes to reports/out/rehearsal-0.3.0/.
(
  export VIRTUAL_ENV="$PWD/$rehearsal_venv" PATH="$PWD/$rehearsal_venv/bin:$PATH"
  # shellcheck disable=SC2046
  bash scripts/install-trn2.sh && bash scripts/trn2.sh --neuron-dress-rehearsal --rehearsal-host "$REHEARSAL_HOST" \
    $(grep -v '^#' scripts/rehearsal-030-sample.txt) --report-dir reports/out/rehearsal-0.3.0 "$@"
)
upstream_rehearsal=$?
echo "selftest: the rehearsal sample on torchtitan 0.3.0 done after ${SECONDS} s"
bash scripts/rehearse-py312.sh "$REHEARSAL_HOST" "$@"
py312=$?
echo "selftest: the rehearsal's cheap contracts on Python 3.12 done after ${SECONDS} s"
echo "selftest: meta tests exit ${meta}; cpu tier exit ${first}; the Slurm stage exit ${slurm};" \
     "the 5059f32c5 sample exit ${second};" \
     "one contract per area on torchtitan b5bcd76c6 exit ${newer}; the exactness contracts under $other kernels" \
     "exit ${matrix}; Neuron dress rehearsal on 5059f32c5 and trn2 upgrade rehearsal exit ${third};" \
     "the rehearsal sample on 0.3.0 exit ${upstream_rehearsal};" \
     "the rehearsal's cheap contracts on Python 3.12 exit ${py312}"
for status in "$meta" "$first" "$slurm" "$second" "$newer" "$matrix" "$third" "$upstream_rehearsal" "$py312"; do
  if [ "$status" -ne 0 ]; then exit "$status"; fi
done
exit 0
