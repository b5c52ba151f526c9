"""``torch.compile(backend="neuron")`` (REHEARSAL STAND-IN): on Trainium the captured graphs are
compiled by neuronx-cc; here they run as ``aot_eager`` (AOTAutograd, eager kernels on the device).
Found by dynamo through the ``torch_dynamo_backends`` entry point when the package is installed."""


def neuron_backend(gm, example_inputs, **kwargs):
    from torch._dynamo.backends.debugging import aot_eager

    return aot_eager(gm, example_inputs, **kwargs)
