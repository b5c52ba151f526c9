"""The Neuron driver's per-core device-memory counters (REHEARSAL STAND-IN, never Trainium evidence).

What it reproduces: aws-neuron-sdk ``tools/neuron-sys-tools/neuron-sysfs-user-guide.rst``
(mirror 81ce03ae): per NeuronCore,
``/sys/devices/virtual/neuron_device/neuron<D>/neuron_core<C>/stats/memory_usage/device_mem/<category>/``
with three files: ``total`` (for memory counters "the current memory usage"), ``present``
("the memory allocation or deallocation amount in the previous operation") and ``peak``
("the maximum memory usage observed"); the categories are the guide's eleven
(``CATEGORIES``); ``neuron<D>/core_count`` is the device's core count.

The stand-in writes that tree under ``$NEURON_REHEARSAL_SYSFS`` (unset: no tree) for the
first core this process reserved, each time ``torch.neuron.synchronize()`` returns:

- ``tensors``: the allocator's bytes (``total`` its current allocated bytes, ``peak`` the
  largest it held since the process began, never reset);
- ``model_code``, ``constants``, ``model_shared_scratchpad``, ``dma_rings``,
  ``collectives``: the stand-in compiler release's ``_neuron_rehearsal.neff_costs.DEVICE_MEMORY``,
  the same share of this core's cap (``NEURON_REHEARSAL_CORE_MEMORY_BYTES``) as of a real 24 GiB
  core, present once the runtime holds the core;
- every other category: 0.

Looser than the real thing: the real driver updates the counters at each allocation, here
only at a synchronize (the suite reads them after one, as Neuron's profiling guide says to:
``tools/neuron-explorer/how-to-profile-workload.rst``, "Neuron is asynchronous ... Without
sync"); the runtime categories do not count against the allocator's cap (a real core's HBM
holds both). The core index within its device: the guide does not say whether it counts
logical or physical cores at LNC=2, so the host matrix holds both sides (the host file's
``sysfs_cores``): "logical" (the default: neuron-monitor numbers a trn2.48xlarge's cores 0-64,
i.e. logical ones) writes logical core ``c`` of a device as ``neuron_core<c>`` with
``core_count`` the logical cores; "physical" writes ``core_count`` 8 (Trainium2's physical
cores) and the logical core's counters under its first physical core, ``neuron_core<LNC*c>``
(ASSUMED), the other one's at zero: a reader that takes the count for logical cores reads
another core's counters there.
"""

from __future__ import annotations

import atexit
import os

import torch

SYSFS_ENV = "NEURON_REHEARSAL_SYSFS"
CORES_PER_DEVICE_ENV = "NEURON_REHEARSAL_CORES_PER_DEVICE"
CATEGORIES = ("collectives", "constants", "dma_rings", "driver_memory", "model_code", "model_shared_scratchpad",
              "nonshared_scratchpad", "notifications", "runtime_memory", "tensors", "uncategorized")

_last: dict[str, int] = {}
_peak: dict[str, int] = {}


def _first_core() -> int:
    spec = str(torch.ops.neuron_rt.visible_cores()).split(",")[0]
    return int(spec.split("-")[0])


def runtime_bytes() -> dict[str, int]:
    """Each runtime category's bytes on this core: the release's share of a real core, of this cap."""
    from _neuron_rehearsal import neff_costs

    cap = int(torch.ops.neuron_rt.memory_cap())
    return {name: int(cap * size / neff_costs.CORE_BYTES) for name, size in neff_costs.DEVICE_MEMORY.items()}


def _write(path: str, value: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{value}\n")
    os.replace(tmp, path)


def update() -> None:
    """Write this process's core's counters (a no-op without ``$NEURON_REHEARSAL_SYSFS`` or
    before the runtime holds a core)."""
    root = os.environ.get(SYSFS_ENV)
    if not root or not torch.ops.neuron_rt.is_initialized():
        return
    current = {name: 0 for name in CATEGORIES}
    current.update(runtime_bytes())
    current["tensors"] = int(torch.accelerator.memory_allocated(torch.neuron.current_device()))
    if not _last:  # the runtime frees the core's memory as the process ends: its totals go to 0
        atexit.register(_write_all, root, dict.fromkeys(CATEGORIES, 0), 0)
    _write_all(root, current, int(torch.accelerator.max_memory_allocated(torch.neuron.current_device())))


def _numbering() -> str:
    """The rehearsed host's ``sysfs_cores`` ("logical", the default, or "physical")."""
    from torch_neuronx._host import setting

    return setting("sysfs_cores", "logical", ("logical", "physical"))


def _write_all(root: str, current: dict[str, int], allocator_peak: int) -> None:
    per_device = int(os.environ.get(CORES_PER_DEVICE_ENV) or 4)
    core = _first_core()
    device_dir = os.path.join(root, f"neuron{core // per_device}")
    index, listed = core % per_device, per_device
    if _numbering() == "physical":
        lnc = 8 // per_device  # Trainium2: 8 physical cores a device
        index, listed = index * lnc, 8
        for other in range(index + 1, index + lnc):  # the logical core's other physical cores
            _write_zero(os.path.join(device_dir, f"neuron_core{other}", "stats", "memory_usage", "device_mem"))
    base = os.path.join(device_dir, f"neuron_core{index}", "stats", "memory_usage", "device_mem")
    for name, value in current.items():
        folder = os.path.join(base, name)
        os.makedirs(folder, exist_ok=True)
        peak = max(_peak.get(name, 0), value, allocator_peak if name == "tensors" else 0)
        _write(os.path.join(folder, "total"), value)
        _write(os.path.join(folder, "present"), value - _last.get(name, 0))
        _write(os.path.join(folder, "peak"), peak)
        _last[name], _peak[name] = value, peak
    _write(os.path.join(device_dir, "core_count"), listed)


def _write_zero(base: str) -> None:
    for name in CATEGORIES:
        os.makedirs(os.path.join(base, name), exist_ok=True)
        for counter in ("total", "present", "peak"):
            _write(os.path.join(base, name, counter), 0)
