#!/usr/bin/env bash
# The Neuron dress rehearsal's environment (called by `bash scripts/setup-venv.sh rehearsal`):
# the titan-0.3.0 venv cloned with hard links (torch and the rest shared, never copied), plus
# the stand-ins of the Neuron layer installed as distributions under their real names with a
# +rehearsal version: torch-neuronx (a `neuron` device in host memory, a C++ extension
# compiled here against this torch), neuronx-cc (nkilib's kernel and the NKI launch checks),
# torchtitan-neuron, aws-neuronx-tools (neuron-ls). No other environment ever gets them
# (meta_tests/test_rehearsal_env.py). Idempotent; prints the venv's path on stdout.
# With the argument py312: the same on the reference stack built from nothing on CPython 3.12
# (.venv-py312, the TorchNeuron beta's Python), as .venv-rehearsal-py312.
set -euo pipefail
exec 3>&1 1>&2
cd "$(dirname "$0")/.."
case "${1:-}" in
  "")    base=$(bash scripts/setup-venv.sh titan-0.3.0);       venv=.venv-rehearsal ;;
  py312) base=$(bash scripts/setup-venv.sh titan-0.3.0-py312); venv=.venv-rehearsal-py312 ;;
  *) echo "setup-rehearsal-venv: unknown argument '$1' (none, or py312)" >&2; exit 2 ;;
esac
standins=(neuron_standins/neuronx-cc neuron_standins/torch-neuronx neuron_standins/torchtitan-neuron
          neuron_standins/aws-neuronx-tools)
sources=$(find "${standins[@]}" -type f \( -name '*.py' -o -name '*.cpp' -o -name '*.toml' \) \
            -not -path '*/build/*' | LC_ALL=C sort)
want=$(cat "$base/.installed" scripts/setup-rehearsal-venv.sh $sources | sha256sum | cut -c1-16)
if [ -f "$venv/.installed" ] && [ "$(cat "$venv/.installed")" = "$want" ]; then
  echo "$venv" >&3
  exit 0
fi
echo "setup-rehearsal-venv: building $venv (clone of $base, stand-ins compiled and installed)" >&2
rm -rf "$venv"
"$base/bin/python" -c 'import sys; from pathlib import Path
from upgrades.candidate_env import clone_venv
clone_venv(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve())' "$base" "$venv"
# --no-build-isolation: torch_neuronx._C is compiled against the torch it will run with.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  "${standins[@]/#/./}"
for dir in "${standins[@]}"; do rm -rf "$dir/build"; done
"$venv/bin/python" - <<'PY'
import sys
from importlib import metadata
for dist in ("torch-neuronx", "neuronx-cc", "torchtitan-neuron", "aws-neuronx-tools"):
    version = metadata.version(dist)
    if not version.endswith("+rehearsal"):
        sys.exit(f"setup-rehearsal-venv: {dist} {version} is not a rehearsal stand-in")
PY
echo "$want" > "$venv/.installed"
echo "$venv" >&3
