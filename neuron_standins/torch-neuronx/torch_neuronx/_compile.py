"""``torch.compile(backend="neuron")`` (REHEARSAL STAND-IN): on Trainium the captured graphs are
compiled by neuronx-cc into NEFFs, kept in the compile cache; here they run as ``aot_eager``
(AOTAutograd, eager kernels on the device). Found by dynamo through the
``torch_dynamo_backends`` entry point when the package is installed.

So that the harness's cache bookkeeping runs in the rehearsal, each captured graph still gets
an entry in the compile cache, in the documented layout and with the documented log lines
(aws-neuron-sdk about-neuron/arch/neuron-features/neuron-caching.rst): the cache is
``NEURON_COMPILE_CACHE_URL`` (default ``/var/tmp/neuron-compile-cache``), an entry is
``neuronxcc-<compiler version>/MODULE_<graph hash>+<flags hash>/model.neff`` (here a text file
saying no NEFF was made); every graph logs ``Compile cache path: <cache>`` first, a hit then
``Using a cached neff at <path>``, a miss ``Compiler status PASS`` once compiled. A graph whose compile was killed is marked failed
(``model.neff.failed``, our name); later runs log ``Got a cached failed neff at <path>. Will
skip compilation, please set --retry_failed_compilation for recompilation`` and fail, unless
``--retry_failed_compilation`` is in ``NEURON_CC_FLAGS``, as documented.
"""

from __future__ import annotations

import hashlib
import os
import sys

COMPILER_VERSION = "2.28.7631.0+rehearsal"
DEFAULT_CACHE = "/var/tmp/neuron-compile-cache"


def _log(message: str) -> None:
    print(f"INFO ||NCC_WRAPPER||: {message}", file=sys.stderr, flush=True)


def _entry(gm) -> str:
    cache = os.environ.get("NEURON_COMPILE_CACHE_URL") or DEFAULT_CACHE
    flags = os.environ.get("NEURON_CC_FLAGS", "")
    graph = hashlib.sha256(gm.code.encode()).hexdigest()[:16]
    flag_hash = hashlib.md5(flags.replace("--retry_failed_compilation", "").strip().encode()).hexdigest()[:8]
    return os.path.join(cache, f"neuronxcc-{COMPILER_VERSION}", f"MODULE_{int(graph, 16)}+{flag_hash}")


def neuron_backend(gm, example_inputs, **kwargs):
    """One rank at a time per cache entry (the ranks of a launch compile the same graphs)."""
    import fcntl

    entry = _entry(gm)
    os.makedirs(entry, exist_ok=True)
    with open(os.path.join(entry, "entry.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _compile_or_reuse(entry, gm, example_inputs, **kwargs)


def _compile_or_reuse(entry: str, gm, example_inputs, **kwargs):
    from torch._dynamo.backends.debugging import aot_eager

    neff = os.path.join(entry, "model.neff")
    failed = neff + ".failed"
    _log(f"Compile cache path: {os.path.dirname(os.path.dirname(entry))}")
    if os.path.exists(failed) and "--retry_failed_compilation" not in os.environ.get("NEURON_CC_FLAGS", ""):
        _log(f"Got a cached failed neff at {neff}. Will skip compilation, please set "
             "--retry_failed_compilation for recompilation.")
        raise RuntimeError(f"neuronx-cc (rehearsal stand-in): a failed compile is cached at {neff}")
    if os.path.exists(neff):
        _log(f"Using a cached neff at {neff}. Exiting with a successfully compiled graph.")
    else:
        with open(failed, "w") as f:  # until the compile completes, as an interrupted one stays
            f.write("rehearsal: compile started\n")
        with open(neff + ".tmp", "w") as f:
            f.write("REHEARSAL STAND-IN: no NEFF; the graph runs as aot_eager\n" + gm.code)
        os.replace(neff + ".tmp", neff)
        os.remove(failed)
        _log("Compiler status PASS")
    return aot_eager(gm, example_inputs, **kwargs)
