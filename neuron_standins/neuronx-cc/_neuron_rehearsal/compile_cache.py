"""REHEARSAL STAND-IN, never trn2 evidence: the compile cache every stand-in compile goes
through (a ``torch.compile(backend="neuron")`` graph, ``torch_neuronx._compile``; an NKI
kernel launched eagerly on the device, ``_neuron_rehearsal.launch``).

Reproduces aws-neuron-sdk ``about-neuron/arch/neuron-features/neuron-caching.rst``: the cache
is ``NEURON_COMPILE_CACHE_URL`` (default ``/var/tmp/neuron-compile-cache``), an entry is
``neuronxcc-<compiler version>/MODULE_<graph hash>+<flags hash>/model.neff`` (here a text file
saying no NEFF was made); every compile logs ``Compile cache path: <cache>`` first, a hit then
``Using a cached neff at <path>``, a miss ``Compiler status PASS`` once compiled. A compile
that was killed leaves the entry marked failed (``model.neff.failed``, our name); later
compiles log ``Got a cached failed neff at <path>. Will skip compilation, please set
--retry_failed_compilation for recompilation`` and fail, unless ``--retry_failed_compilation``
is in ``NEURON_CC_FLAGS``, as documented. One process at a time per entry (the ranks of a
launch compile the same graphs).

A miss takes ``neff_costs.COMPILE_SECONDS_PER_GRAPH`` (the stand-in release's modelled compile
time; a hit takes none), so a first step on a cold cache costs what the release's compiler
costs, and one on a warm cache does not.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import time

COMPILER_VERSION = "2.28.7631.0+rehearsal"
DEFAULT_CACHE = "/var/tmp/neuron-compile-cache"


def log(message: str) -> None:
    print(f"INFO ||NCC_WRAPPER||: {message}", file=sys.stderr, flush=True)


def entry(program: str) -> str:
    """The cache entry of a program (its text) under the current flags."""
    cache = os.environ.get("NEURON_COMPILE_CACHE_URL") or DEFAULT_CACHE
    flags = os.environ.get("NEURON_CC_FLAGS", "")
    graph = hashlib.sha256(program.encode()).hexdigest()[:16]
    flag_hash = hashlib.md5(flags.replace("--retry_failed_compilation", "").strip().encode()).hexdigest()[:8]
    return os.path.join(cache, f"neuronxcc-{COMPILER_VERSION}", f"MODULE_{int(graph, 16)}+{flag_hash}")


def compile_or_reuse(program: str) -> str:
    """Compile ``program`` into the cache, or reuse its entry; returns the NEFF's path."""
    folder = entry(program)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "entry.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _compile_or_reuse(folder, program)


def _compile_or_reuse(folder: str, program: str) -> str:
    from _neuron_rehearsal import neff_costs

    neff = os.path.join(folder, "model.neff")
    failed = neff + ".failed"
    log(f"Compile cache path: {os.path.dirname(os.path.dirname(folder))}")
    if os.path.exists(failed) and "--retry_failed_compilation" not in os.environ.get("NEURON_CC_FLAGS", ""):
        log(f"Got a cached failed neff at {neff}. Will skip compilation, please set "
            "--retry_failed_compilation for recompilation.")
        raise RuntimeError(f"neuronx-cc (rehearsal stand-in): a failed compile is cached at {neff}")
    if os.path.exists(neff):
        log(f"Using a cached neff at {neff}. Exiting with a successfully compiled graph.")
        return neff
    with open(failed, "w") as f:  # until the compile completes, as an interrupted one stays
        f.write("rehearsal: compile started\n")
    time.sleep(neff_costs.COMPILE_SECONDS_PER_GRAPH)  # the release's modelled compile time
    with open(neff + ".tmp", "w") as f:
        f.write("REHEARSAL STAND-IN: no NEFF; the program runs in PyTorch\n" + program)
    os.replace(neff + ".tmp", neff)
    os.remove(failed)
    log("Compiler status PASS")
    return neff
