"""REHEARSAL STAND-IN of aws-neuronx-tools: neuron-ls."""
