"""REHEARSAL STAND-IN, never trn2 evidence: private plumbing shared by the Neuron stand-ins.

This package is not part of any Neuron product. It holds what the real stack keeps inside
``nki`` / ``neuronx-cc`` / the Neuron runtime and the stand-ins of ``nkilib`` and
``torch_neuronx`` both need: the launch grid a kernel runs under and the LNC (logical
NeuronCore config) checks made when a kernel is compiled and loaded. See ``launch`` for
what each fact reproduces and where it comes from, and ``neuron_standins/README.md``.
"""
