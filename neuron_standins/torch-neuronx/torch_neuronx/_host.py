"""The rehearsed host's settings the stand-in runtime and driver read (REHEARSAL STAND-IN, never
Trainium evidence): keys of the host file ``$NEURON_REHEARSAL_HOST`` (``neuron_standins/hosts/``)
that take one side of what the Neuron docs leave open."""

from __future__ import annotations

import json
import os


def setting(key: str, default: str, allowed: tuple[str, ...]) -> str:
    """The host file's ``key`` (``default`` without a host file or the key); a value outside
    ``allowed`` is refused, naming the file."""
    path = os.environ.get("NEURON_REHEARSAL_HOST")
    if not path:
        return default
    with open(path) as f:
        value = json.load(f).get(key, default)
    if value not in allowed:
        raise ValueError(f"torch_neuronx (rehearsal stand-in): {path}: {key} {value!r} is not one of "
                         f"{', '.join(map(repr, allowed))}")
    return value
