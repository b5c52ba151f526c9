"""REHEARSAL STAND-IN, never trn2 evidence: the Neuron pieces of TorchTitan Neuron.

TorchTitan Neuron is a fork of upstream torchtitan main installed from its repository, so
``torchtitan`` itself is the fork; the rehearsal keeps the installed upstream torchtitan
for that and stands in only for what the write-up imports from ``torchtitan_neuron``
(CONTRACTS.md "The three paths", path 3): ``torchtitan_neuron.models.qwen3.config_registry
.qwen3_nki_moe_config``, whose recipe swaps the grouped-experts implementation for the NKI
one, uses SDPA and a gather-free rotary embedding. The stand-in classes compute exactly what
upstream's do (they subclass them); only their names show they were swapped.
"""

__version__ = "0.2.2+rehearsal"
