"""REHEARSAL STAND-IN: Qwen3 pieces of TorchTitan Neuron (see ``config_registry``)."""
