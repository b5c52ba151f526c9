"""REHEARSAL STAND-IN, never trn2 evidence: the Neuron pieces of TorchTitan Neuron.

TorchTitan Neuron is a fork of upstream torchtitan main installed from its repository, so
``torchtitan`` itself is the fork; the rehearsal keeps the installed upstream torchtitan
for that and stands in only for what the write-up imports from ``torchtitan_neuron``
(CONTRACTS.md "The three paths", path 3): ``torchtitan_neuron.models.qwen3.config_registry
.qwen3_nki_moe_config``, whose recipe swaps the grouped-experts implementation for the NKI
one, uses SDPA and a gather-free rotary embedding. The stand-in classes subclass upstream's and
compute with code of their own (a loop over experts; RoPE rows sliced or computed, never
gathered), so a contract can tell which implementation ran, not only what it is called.
"""

__version__ = "0.2.2+rehearsal"
