"""REHEARSAL STAND-IN, never trn2 evidence: the one place the ``neuron`` device becomes CPU.

The real torch_neuronx registers Trainium as the PyTorch device ``neuron`` and the
process-group backend ``neuron`` (CONTRACTS.md "Topology"). Without Trainium, this module
maps both onto CPU, and nothing else in the rehearsal does:

- ``DEVICE_MAP``: where a tensor of the device type ``neuron`` really lives (read by the
  suite's ``fixtures.kernel_worker.device_for``, its only reader);
- ``torch.neuron``: ``is_available()`` True, one device per process (the ranks' view);
- the ``neuron`` process-group backend: registered, backed by gloo, setting
  ``NEURON_RT_VISIBLE_CORES`` to ``LOCAL_RANK`` when unset as the real one does, and the backend
  torchtitan picks for the device type it runs on (which is CPU here: torchtitan's device
  helpers are pointed at CPU by the suite's own ``fixtures.rank.titan.cpu_runtime`` patches);
- the ``neuron`` torch.compile backend (which on Trainium compiles captured graphs with
  neuronx-cc): here it runs the captured graphs as ``aot_eager``;
- what CPU needs that Trainium does not: FSDP reduces with SUM (gloo has no PREMUL_SUM),
  and the transformers backend's flex attention runs as SDPA (flex has no CPU backward).
"""

from __future__ import annotations

DEVICE_MAP = {"neuron": "cpu"}
_installed = False


def _gloo_backed_neuron(store, rank, world_size, timeout):
    """The ``neuron`` process group (gloo underneath). As the Neuron backend does at
    ``init_process_group(backend="neuron")`` (CONTRACTS.md "Topology"): one device per
    process, ``NEURON_RT_VISIBLE_CORES`` set to ``LOCAL_RANK`` when unset."""
    import os

    import torch.distributed as dist

    if "NEURON_RT_VISIBLE_CORES" not in os.environ and "LOCAL_RANK" in os.environ:
        os.environ["NEURON_RT_VISIBLE_CORES"] = os.environ["LOCAL_RANK"]
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


def _force_sum_reductions() -> None:
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    group = _fsdp_param_group.FSDPParamGroup
    if getattr(group, "_rehearsal_sum_only", False):
        return
    original = group.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.force_sum_reduction_for_comms = True

    group.__init__ = __init__
    group._rehearsal_sum_only = True


def install() -> None:
    global _installed
    if _installed:
        return
    import torch
    import torch.distributed as dist

    from fixtures.rank.titan import cpu_runtime

    torch.neuron = cpu_runtime.CPU_DEVICE_MODULE
    if "neuron" not in dist.Backend.backend_list:
        dist.Backend.register_backend("neuron", _gloo_backed_neuron, devices=["cpu"])
    dist.Backend.default_device_backend_map["cpu"] = "neuron"
    if dist.is_available():
        _force_sum_reductions()
    from torch._dynamo import list_backends, lookup_backend, register_backend

    if "neuron" not in list_backends(exclude_tags=()):
        register_backend(name="neuron", compiler_fn=lookup_backend("aot_eager"))
    cpu_runtime.use_cpu_device()
    try:
        cpu_runtime.transformers_backend_sdpa()
    except ImportError:  # torchtitan without the transformers backend: nothing to reroute
        pass
    _installed = True
