#!/usr/bin/env bash
# Create the virtual environment of one CPU reference stack and install it, pinned exactly.
#
#   bash scripts/setup-venv.sh [STACK]
#
# STACK (default titan-0.3.0):
#   titan-0.3.0    .venv                 torch 2.14.1, transformers 5.23.0, torchtitan 0.3.0 (PyPI)
#   titan-5059f32  .venv-titan-5059f32   the same with torchtitan built from upstream main at
#                                        5059f32c5 (2026-07-20), the API vintage of the Neuron fork
#   titan-b5bcd76  .venv-titan-b5bcd76   the same with torchtitan upstream main at b5bcd76c6 (2026-08-21), a
#                                        month past the fork's vintage (Grain dataloader, token-count
#                                        batches, folded q/k): the snapshot the fork moves to next
#   rehearsal      .venv-rehearsal       the Neuron dress rehearsal's environment: .venv cloned with
#                                        hard links, plus the stand-ins of neuron_standins/ installed
#                                        as distributions (torch-neuronx, neuronx-cc, torchtitan-neuron,
#                                        aws-neuronx-tools, all +rehearsal); torch_neuronx's C++
#                                        extension is compiled here (about a minute)
#   titan-0.3.0-py312  .venv-py312       the reference stack built from nothing on CPython 3.12 (the
#                                        TorchNeuron beta's Python): the same pins and constraints
#   rehearsal-py312    .venv-rehearsal-py312  the rehearsal's environment on that 3.12 venv
#   rehearsal-5059f32  .venv-rehearsal-5059f32  the rehearsal's environment on .venv-titan-5059f32: the
#                                        torchtitan trn2 users run (the Neuron fork's upstream vintage)
# The 3.12 stacks use CONFORMANCE_PYTHON312, else the newest ~/.pyenv/versions/3.12.*, else python3.12.
# Both cpu stacks also get the kernel vendor's pure-torch RoPE reference (nki-library at d2ad3a5).
#
# The two packages no reachable index serves at the needed commit come from a wheelhouse
# folder when one is given (CONFORMANCE_WHEELHOUSE, or ../shared/wheels when it exists)
# and otherwise from their git repositories (needs internet access).
# Idempotent: does nothing when the venv already matches pyproject.toml, the constraints and
# the sources of those two packages. Prints the venv's path on stdout (all else on stderr).
set -euo pipefail
exec 3>&1 1>&2
cd "$(dirname "$0")/.."
STACK=${1:-titan-0.3.0}
case "$STACK" in
  *-py312)
    py312=${CONFORMANCE_PYTHON312:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12 2>/dev/null \
                                     | sort -V | tail -1)}
    PYTHON=${py312:-python3.12}
    "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else "found Python " + sys.version.split()[0])' || {
      echo "setup-venv: stack $STACK needs CPython 3.12 (CONFORMANCE_PYTHON312, ~/.pyenv/versions/3.12.*, python3.12): $PYTHON" >&2
      exit 2; } ;;
  *) PYTHON=${PYTHON:-python3} ;;
esac
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is needed, found " + sys.version.split()[0])'

case "$STACK" in
  titan-b5bcd76) TITAN_COMMIT=b5bcd76c6 ;;
  *)             TITAN_COMMIT=5059f32c5 ;;
esac
TITAN_GIT="torchtitan @ git+https://github.com/pytorch/torchtitan@$TITAN_COMMIT"
NKILIB_GIT="nki-library @ git+https://github.com/aws-neuron/nki-library@d2ad3a5"
case "$STACK" in
  titan-0.3.0)   venv=.venv;               constraints=requirements/cpu-constraints.txt ;;
  titan-0.3.0-py312) venv=.venv-py312;     constraints=requirements/cpu-constraints.txt ;;
  titan-5059f32) venv=.venv-titan-5059f32; constraints=requirements/cpu-titan-5059f32-constraints.txt ;;
  titan-b5bcd76) venv=.venv-titan-b5bcd76; constraints=requirements/cpu-titan-b5bcd76-constraints.txt ;;
  rehearsal)     exec 1>&3 3>&-; exec bash scripts/setup-rehearsal-venv.sh ;;
  rehearsal-py312) exec 1>&3 3>&-; exec bash scripts/setup-rehearsal-venv.sh py312 ;;
  rehearsal-5059f32) exec 1>&3 3>&-; exec bash scripts/setup-rehearsal-venv.sh titan-5059f32 ;;
  *) echo "setup-venv: unknown stack '$STACK' (titan-0.3.0, titan-5059f32, titan-b5bcd76, rehearsal," \
          "titan-0.3.0-py312, rehearsal-py312 or rehearsal-5059f32)" >&2; exit 2 ;;
esac

wheelhouse=${CONFORMANCE_WHEELHOUSE:-}
if [ -z "$wheelhouse" ] && [ -d ../shared/wheels ]; then wheelhouse=../shared/wheels; fi
if [ -n "$wheelhouse" ]; then
  titan_src=$(ls "$wheelhouse"/torchtitan-0.2.2+git${TITAN_COMMIT:0:7}-*.whl 2>/dev/null | head -1 || true)
  nkilib_src=$(ls "$wheelhouse"/nki_library-*+gd4920de-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$titan_src" ] || [ -z "$nkilib_src" ]; then
    echo "setup-venv: wheelhouse $wheelhouse lacks torchtitan-0.2.2+git${TITAN_COMMIT:0:7} or nki_library-*+gd4920de" >&2
    exit 2
  fi
  if [ -f "$wheelhouse/SHA256SUMS" ]; then
    (cd "$wheelhouse" && sha256sum --quiet -c SHA256SUMS) || {
      echo "setup-venv: a wheel in $wheelhouse does not match its SHA256SUMS" >&2; exit 2; }
  fi
  sources="$(sha256sum "$titan_src" "$nkilib_src" | cut -c1-64)"
else
  titan_src=$TITAN_GIT
  nkilib_src=$NKILIB_GIT
  sources="$TITAN_GIT $NKILIB_GIT"
fi

want=$(cat pyproject.toml requirements/cpu-constraints.txt "$constraints" scripts/setup-venv.sh \
         <(echo "$STACK $sources") | sha256sum | cut -c1-16)
if [ -f "$venv/.installed" ] && [ "$(cat "$venv/.installed")" = "$want" ]; then
  echo "$venv" >&3
  exit 0
fi
echo "setup-venv: building $venv for stack $STACK (wheels from ${wheelhouse:-their git repositories})" >&2
case "$STACK" in
  # The other torchtitan stacks start as the reference stack's venv cloned with hard links
  # (torch, the CUDA wheels and the rest shared, never copied or unpacked again); then only
  # torchtitan and what its constraints differ in are installed, and what they lack removed.
  titan-5059f32|titan-b5bcd76)
    base=$(bash scripts/setup-venv.sh titan-0.3.0)
    rm -rf "$venv"
    "$base/bin/python" -c 'import sys; from pathlib import Path
from upgrades.candidate_env import clone_venv
clone_venv(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve())' "$base" "$venv" ;;
  *) [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv" ;;
esac
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
# The stack's exact pins, written once: pyproject.toml's cpu extra (fixtures/tiers/pins.py).
mapfile -t stack_pins < <("$PYTHON" -m fixtures.tiers.pins --only torch transformers triton)
[ ${#stack_pins[@]} -eq 3 ] || { echo "setup-venv: could not read the cpu extra's pins from pyproject.toml" >&2; exit 2; }
# torch first (${stack_pins[0]}): a CUDA build that runs without a GPU; on these machines pip takes it
# (and the nvidia wheels) from local disk. The constraints pin every transitive package.
"${pip[@]}" -c "$constraints" "${stack_pins[0]}" nvidia-nvjitlink cuda-pathfinder
case "$STACK" in
  titan-0.3.0|titan-0.3.0-py312) "${pip[@]}" -c "$constraints" -e ".[cpu,dev]" ;;
  # torchtitan's own dependencies resolve under the constraints (spmd_types 0.2.1 there).
  titan-5059f32|titan-b5bcd76)
                 "${pip[@]}" -c "$constraints" -e . "${stack_pins[@]}" "$titan_src" ;;
esac
# A cloned venv keeps nothing its constraints do not name (the reference stack's torchtitan
# dependencies), so it holds what a venv built from nothing would.
"$venv/bin/python" - "$constraints" <<'PY'
import json, subprocess, sys
from packaging.utils import canonicalize_name
wanted = {canonicalize_name(l.split("==")[0]) for l in open(sys.argv[1]) if "==" in l and not l.startswith("#")}
wanted |= {"qwen3-trn-conformance", "nki-library", "torchtitan", "pip", "setuptools", "wheel"}
have = json.loads(subprocess.run([sys.executable, "-m", "pip", "list", "--format=json"], capture_output=True,
                                 text=True, check=True).stdout)
extra = sorted(d["name"] for d in have if canonicalize_name(d["name"]) not in wanted)
if extra:
    print(f"setup-venv: removing what {sys.argv[1]} does not name: {' '.join(extra)}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "--quiet", "-y", *extra], check=True)
PY
# nki-library declares neuronx-cc, neuronx-cc-stubs and nki, which exist only on AWS's
# index (their PyPI names are placeholders); its torch reference needs torch alone.
"${pip[@]}" --no-deps "$nkilib_src"
# pip check must pass, except for exactly those three Neuron-only requirements (the list and
# the parsing the cpu tier's pip check contract uses: reports.inventory.pip_check_problems).
unexpected=$("$venv/bin/python" -c 'import sys
from fixtures.tiers.tier_profile import NKI_LIBRARY_NEURON_ONLY
from reports.inventory import pip_check_problems
print("\n".join(pip_check_problems(sys.executable, NKI_LIBRARY_NEURON_ONLY)[0]))')
if [ -n "$unexpected" ]; then
  printf 'setup-venv: pip check failed for %s:\n%s\n' "$venv" "$unexpected" >&2
  exit 1
fi
echo "$want" > "$venv/.installed"
echo "$venv" >&3
