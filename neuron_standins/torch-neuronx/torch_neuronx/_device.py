"""``torch.neuron``: the device module (REHEARSAL STAND-IN, never Trainium evidence).

One logical NeuronCore per process: device index 0 of the cores ``NEURON_RT_VISIBLE_CORES``
gives it (the runtime numbers a process's cores from 0), or, where the variable was unset under
a launcher, the core TorchNeuron took from ``LOCAL_RANK``, which is index ``LOCAL_RANK`` of the
instance's cores (``csrc/neuron.cpp``, "device ownership", with the sources). Work runs
synchronously on the host, so streams and events order nothing (they exist for the code that
uses them, e.g. FSDP2).
Memory figures come from the C++ allocator through ``torch.accelerator``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import torch

_rt = torch.ops.neuron_rt
_TYPE = "neuron"


def _index(device=None) -> int:
    """Index of ``device`` (None, int, str or torch.device); the C++ guard rejects every index
    but the process's own (``current_device()``), saying why."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != _TYPE:
            raise ValueError(f"Expected a neuron device, got {device}")
        idx = current_device() if device.index is None else device.index
    else:
        idx = int(device)
    torch._C._accelerator_setDeviceIndex(idx)  # raises for another index, with the reason
    return idx


# -- device --------------------------------------------------------------------------------


def is_available() -> bool:
    return True


def device_count() -> int:
    """The logical cores the process sees: its NEURON_RT_VISIBLE_CORES list, else the instance's."""
    return int(_rt.device_count())


def current_device() -> int:
    return int(_rt.device_index())


def set_device(device) -> None:
    _index(device)


def is_initialized() -> bool:
    """True once the runtime reserved this process's cores (first allocation or init())."""
    return bool(_rt.is_initialized())


def init() -> None:
    """Initialise the device: reserve the visible cores (NEURON_RT_VISIBLE_CORES) now."""
    _rt.init()


_lazy_init = init


def _is_in_bad_fork() -> bool:
    return False


def synchronize(device=None) -> None:
    """Every op has completed when it returns; the stand-in driver's memory counters are
    written now (``_sysfs``: the real ones change at each allocation)."""
    _index(device)
    from torch_neuronx import _sysfs

    _sysfs.update()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class _NeuronDeviceProperties:
    name: str
    total_memory: int
    logical_nc_config: int
    visible_cores: str
    is_rehearsal: bool = True


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_device_properties(device=None) -> _NeuronDeviceProperties:
    _index(device)
    return _NeuronDeviceProperties(
        name="NeuronCore-v3 (logical, Trainium2) [rehearsal: host memory]",
        total_memory=int(_rt.memory_cap()),
        logical_nc_config=int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "2")),
        visible_cores=str(_rt.visible_cores()),
    )


def get_device_capability(device=None) -> tuple[int, int]:
    _index(device)
    return (3, 0)  # NeuronCore-v3


class device:
    """Context manager selecting the (only) device, like ``torch.cuda.device``."""

    def __init__(self, device):
        self.idx = _index(device)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def get_amp_supported_dtype() -> list[torch.dtype]:
    """For torch.autocast("neuron"): the C++ side registers CUDA's autocast policy."""
    return [torch.bfloat16, torch.float16]


# -- memory (the C++ DeviceAllocator, via torch.accelerator) ---------------------------------


def memory_stats(device=None) -> dict:
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device=None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device=None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device=None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device=None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def mem_get_info(device=None) -> tuple[int, int]:
    return torch.accelerator.get_memory_info(_index(device))


def empty_cache() -> None:
    pass  # no caching allocator: freed memory goes straight back to the host


# -- random --------------------------------------------------------------------------------
# The device's default generator is the CPU default generator (see csrc/neuron.cpp): seeding
# either seeds both, and neuron random ops draw the numbers the CPU tier draws. No
# set_rng_state on purpose: DTensor's RNG tracker would then take the mesh for a CUDA-like one
# and read the state as a philox (seed, offset) pair, which it is not; without it DTensor treats
# the mesh like a CPU mesh (and torch.utils.checkpoint's CPU state restore covers the device).


def _generator() -> torch.Generator:
    return torch._C._accelerator_getDefaultGenerator(current_device())


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


manual_seed_all = manual_seed


def seed() -> None:
    _generator().seed()


seed_all = seed


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device="neuron") -> torch.Tensor:
    _index(device)
    return _generator().get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state()]


# -- streams and events ----------------------------------------------------------------------


class Stream(torch.Stream):
    def __new__(cls, device=None, priority: int = 0, **kwargs):
        _index(device)
        return super().__new__(cls, device=_TYPE, priority=priority, **kwargs)


class Event:
    """``torch.neuron.Event(...)`` makes a plain ``torch.Event`` on the device (torch's C++ Event
    methods accept only exact torch.Event objects, e.g. ``elapsed_time``)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return torch.Event(_TYPE, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def current_stream(device=None) -> torch.Stream:
    return torch.accelerator.current_stream(_index(device))


def default_stream(device=None) -> torch.Stream:
    _index(device)
    return torch.Stream(stream_id=0, device_index=0, device_type=current_stream().device_type)


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream: torch.Stream | None):
    """``with torch.neuron.stream(s):`` makes ``s`` current for the block."""
    if stream is None:
        yield
        return
    prev = current_stream()
    set_stream(stream)
    try:
        yield
    finally:
        set_stream(prev)


StreamContext = stream
