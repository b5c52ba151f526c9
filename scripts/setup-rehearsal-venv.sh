#!/usr/bin/env bash
# The Neuron dress rehearsal's environment (called by `bash scripts/setup-venv.sh rehearsal`):
# the titan-0.3.0 venv cloned with hard links (torch and the rest shared, never copied), plus
# the stand-ins of the Neuron layer installed as distributions under their real names with a
# +rehearsal version: torch-neuronx (a `neuron` device in host memory, a C++ extension
# compiled here against this torch), neuronx-cc (nkilib's kernel and the NKI launch checks),
# torchtitan-neuron, aws-neuronx-tools (neuron-ls). No other environment ever gets them
# (meta_tests/test_rehearsal_env.py). Idempotent; prints the venv's path on stdout.
# With the argument py312: the same on the reference stack built from nothing on CPython 3.12
# (.venv-py312, the TorchNeuron beta's Python), as .venv-rehearsal-py312. With titan-5059f32:
# the same on the titan-5059f32 venv (torchtitan upstream main at 5059f32c5, the Neuron fork's
# vintage: the torchtitan trn2 users run), as .venv-rehearsal-5059f32.
set -euo pipefail
exec 3>&1 1>&2
cd "$(dirname "$0")/.."
case "${1:-}" in
  "")    base=$(bash scripts/setup-venv.sh titan-0.3.0);       venv=.venv-rehearsal ;;
  py312) base=$(bash scripts/setup-venv.sh titan-0.3.0-py312); venv=.venv-rehearsal-py312 ;;
  titan-5059f32) base=$(bash scripts/setup-venv.sh titan-5059f32); venv=.venv-rehearsal-5059f32 ;;
  *) echo "setup-rehearsal-venv: unknown argument '$1' (none, py312 or titan-5059f32)" >&2; exit 2 ;;
esac
standins=(neuron_standins/neuronx-cc neuron_standins/torch-neuronx neuron_standins/torchtitan-neuron
          neuron_standins/aws-neuronx-tools)
sources=$(find "${standins[@]}" -type f \( -name '*.py' -o -name '*.cpp' -o -name '*.toml' \) \
            -not -path '*/build/*' | LC_ALL=C sort)
# The clone depends on the base venv and this script; the stand-ins on their sources too.
want_base=$(cat "$base/.installed" scripts/setup-rehearsal-venv.sh | sha256sum | cut -c1-16)
want=$(cat "$base/.installed" scripts/setup-rehearsal-venv.sh $sources | sha256sum | cut -c1-16)
if [ -f "$venv/.installed" ] && [ "$(cat "$venv/.installed")" = "$want" ]; then
  echo "$venv" >&3
  exit 0
fi
if [ -f "$venv/.installed-base" ] && [ "$(cat "$venv/.installed-base")" = "$want_base" ]; then
  # only the stand-ins changed: reinstalled in place (a session running meanwhile keeps the
  # modules it loaded; the clone is not removed under it)
  echo "setup-rehearsal-venv: reinstalling the stand-ins into $venv (their sources changed)" >&2
else
  echo "setup-rehearsal-venv: building $venv (clone of $base, stand-ins compiled and installed)" >&2
  rm -rf "$venv"
  "$base/bin/python" -c 'import sys; from pathlib import Path
from upgrades.candidate_env import clone_venv
clone_venv(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve())' "$base" "$venv"
fi
# --no-build-isolation: torch_neuronx._C is compiled against the torch it will run with. The
# build imports torch, which would autoload an installed stand-in torch_neuronx and reserve every
# core (no NEURON_RT_VISIBLE_CORES) from a rehearsal session running meanwhile: autoload off.
# Built from a copy of the sources: setuptools builds in the source folder, and two rehearsal
# venvs built at once (the self-test builds three) would share its build/ folder.
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -r "${standins[@]}" "$copy/"
TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  "${standins[@]/#neuron_standins/$copy}"
"$venv/bin/python" - <<'PY'
import sys
from importlib import metadata
for dist in ("torch-neuronx", "neuronx-cc", "torchtitan-neuron", "aws-neuronx-tools"):
    version = metadata.version(dist)
    if not version.endswith("+rehearsal"):
        sys.exit(f"setup-rehearsal-venv: {dist} {version} is not a rehearsal stand-in")
PY
echo "$want_base" > "$venv/.installed-base"
echo "$want" > "$venv/.installed"
echo "$venv" >&3
