"""REHEARSAL STAND-IN of part of ``nkilib.core.utils.kernel_helpers``, never trn2 evidence.

Source: aws-neuron/nki-library d2ad3a5, ``nkilib/core/utils/kernel_helpers.py``:
``get_program_sharding_info()`` returns ``(grid_ndim, n_prgs, prg_id)``, ``(0, 1, 0)`` for a
non-SPMD launch, else ``nl.num_programs(axes=0)`` and ``nl.program_id(axis=0)``;
``get_verified_program_sharding_info`` returns the same (its optional checks are not enforced
there either); ``div_ceil`` is ceiling division. The launch grid comes from the rehearsal's
launch (``_neuron_rehearsal.launch``), set by ``kernel[lnc](...)`` or
``torch_neuronx.wrap_nki(kernel)[lnc](...)``. Every other helper of the real module is absent.
"""

from __future__ import annotations

from _neuron_rehearsal import launch as _launch


def get_program_sharding_info() -> tuple[int, int, int]:
    grid_ndim = _launch.program_ndim()
    if grid_ndim != 0:
        return grid_ndim, _launch.num_programs(axes=0), _launch.program_id(axis=0)
    return grid_ndim, 1, 0


def get_verified_program_sharding_info(kernel_name: str = "", allowed_ndims=None, max_sharding=None):
    return get_program_sharding_info()


def div_ceil(n, d):
    return (n + d - 1) // d
