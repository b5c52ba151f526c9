"""REHEARSAL STAND-IN of ``torch_neuronx`` (TorchNeuron, torch-neuronx 2.14.3.0 of Neuron 2.33.0), never trn2 evidence.

Importing it makes ``neuron`` a real torch device type through PyTorch's out-of-tree
mechanism, as the real package does ("TorchNeuron ... integrates through PyTorch's standard
PrivateUse1 device backend mechanism", aws-neuron-sdk ``frameworks/torch/pytorch-native-overview.rst``):
``torch.utils.rename_privateuse1_backend("neuron")``, the device module ``torch.neuron``,
the generated tensor methods. Its tensors live in host memory and carry a NeuronCore's limits:

- ``_C`` (``csrc/neuron.cpp``): allocator with a per-core memory cap, device guard, hooks,
  generator, the native storage kernels, a zero-copy CPU fallback for every other op, no
  float64, and the exclusive reservation of the process's visible cores, made as this
  package is imported (ASSUMED: when TorchNeuron starts the runtime is not documented);
- ``torch.neuron`` (``_device``): the device module;
- the ``neuron`` process-group backend (``distributed``): gloo underneath;
- ``torch.compile(backend="neuron")`` (``_compile``): ``aot_eager`` here;
- ``cores``: which process holds which logical core (what ``neuron-ls -a`` shows);
- ``wrap_nki`` / ``nki_op`` (``nki_hop``): the NKI plumbing.

torch itself is not patched. Installed as a distribution (``neuron_standins/torch-neuronx``),
it is loaded on ``import torch`` through torch's ``torch.backends`` entry point
(``_autoload``), as TorchNeuron autoloads ("the torch_neuronx import is only needed when
using NKI kernels", pytorch-native-overview.rst); ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns
that off. ``__version__``: torch-neuronx 2.14.3.0 is the TorchNeuron release of Neuron 2.33.0
for PyTorch 2.14.0 (CONTRACTS.md "Version pinning"); the local label ``+rehearsal`` marks this
stand-in wherever the version is printed. See ``neuron_standins/README.md``.
"""

from __future__ import annotations

import os

import torch

__version__ = "2.14.3.0+rehearsal"
REHEARSAL_STANDIN = True

_registered = False


def _library() -> str:
    here = os.path.dirname(__file__)
    for name in sorted(os.listdir(here)):
        if name.startswith("_C.") and name.endswith(".so"):
            return os.path.join(here, name)
    raise ImportError(
        "torch_neuronx (rehearsal stand-in): the compiled _C extension is missing; build the rehearsal "
        "environment with `bash scripts/setup-venv.sh rehearsal`")


def _register() -> None:
    """Load the kernels, guard and hooks, then name and wire up the backend (torch_openreg's order)."""
    global _registered
    if _registered:
        return
    torch.ops.load_library(_library())
    torch.utils.rename_privateuse1_backend("neuron")
    from torch_neuronx import _device

    torch._register_device_module("neuron", _device)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    from torch_neuronx import distributed

    distributed.register()
    _registered = True
    # ASSUMED, the side worse for the suite (csrc/neuron.cpp "WHEN"): the runtime starts as
    # the package is imported, reserving NEURON_RT_VISIBLE_CORES (else LOCAL_RANK under a
    # launcher, else every core of the instance) before any code of the process runs; a host
    # file may take the other side (``reserve_at: first_use``), so the host matrix has both.
    if _reserve_at() == "import":
        torch.ops.neuron_rt.init()


def _reserve_at() -> str:
    """When the stand-in runtime reserves its cores: the rehearsed host's ``reserve_at``
    (``$NEURON_REHEARSAL_HOST``, ``neuron_standins/hosts/``): "import" (the default) or
    "first_use" (the first allocation, ``torch.neuron.init()`` or the process group)."""
    from torch_neuronx._host import setting

    return setting("reserve_at", "import", ("import", "first_use"))


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group, run by ``import torch``."""
    _register()


_register()

from torch_neuronx.nki_hop import NKIHOPCaller, nki_op, wrap_nki  # noqa: E402

__all__ = ["NKIHOPCaller", "nki_op", "wrap_nki", "__version__"]
