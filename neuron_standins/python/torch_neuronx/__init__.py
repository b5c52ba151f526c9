"""REHEARSAL STAND-IN of ``torch_neuronx`` (TorchNeuron, torch-neuronx 2.14.3.0 of Neuron 2.33.0), never trn2 evidence.

Only the surface the conformance suite uses: ``wrap_nki`` and ``nki_op`` (see
``torch_neuronx.nki_hop`` for their signatures and sources) and ``__version__``. Importing it
installs the rehearsal's stand-in of the ``neuron`` device (``_rehearsal_device.install()``,
written separately), as importing the real package "registers the neuron device and
process-group backend" (the suite's fixtures/rank/titan/*/config_registry.py; aws-neuron/
torch-neuronx README: "It adds a neuron device to upstream PyTorch through the PrivateUse1
mechanism").

``__version__``: torch-neuronx 2.14.3.0 is the TorchNeuron release of Neuron 2.33.0 for
PyTorch 2.14.0 (CONTRACTS.md "Version pinning"); the local label ``+rehearsal`` marks this
stand-in wherever the version is printed. Not reproduced: everything else of torch-neuronx
(``torch_neuronx.nki`` re-export shown in aws-neuron-sdk ``nki/get-started/about/index.rst``,
trace/compile APIs, the distributed backend). See ``neuron_standins/README.md``.
"""

from torch_neuronx.nki_hop import NKIHOPCaller, nki_op, wrap_nki

__version__ = "2.14.3.0+rehearsal"
REHEARSAL_STANDIN = True

__all__ = ["NKIHOPCaller", "nki_op", "wrap_nki", "__version__"]

from torch_neuronx import _rehearsal_device  # noqa: E402  (written by the rehearsal wiring)

_rehearsal_device.install()
