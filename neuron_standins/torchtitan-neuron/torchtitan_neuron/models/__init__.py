"""REHEARSAL STAND-IN: the models of TorchTitan Neuron the write-up imports (``qwen3``)."""
