# Sourced by the scripts that run in the ACTIVE environment (install-trn2.sh, trn2.sh): sets
# $python to $PYTHON, else $VIRTUAL_ENV/bin/python, else python3 on PATH, and stops (exit 2,
# one sentence naming $who) when it is missing or older than the suite's Python: pyproject's
# requires-python (meta_tests/test_install_trn2.py checks both say the same), asked before
# anything runs under it, since an older one cannot even parse the suite.
python=${PYTHON:-${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}}
python=${python:-python3}
command -v "$python" > /dev/null || { echo "$who: no python at '$python' (activate the Neuron environment, or set PYTHON=)" >&2; exit 2; }
if ! version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2]); sys.exit(sys.version_info < (3, 11))'); then
  echo "$who: $python is Python ${version:-of an unknown version}; the suite needs Python >= 3.11" \
       "(Neuron's DLAMIs and containers run 3.12): activate that environment, or set PYTHON=" >&2
  exit 2
fi
