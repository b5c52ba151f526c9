"""REHEARSAL STAND-IN build script: compiles torch_neuronx._C (PyTorch's torch_openreg pattern).

Built with the torch it runs with: ``pip install --no-build-isolation --no-deps .`` in the
rehearsal environment (``bash scripts/setup-venv.sh rehearsal``)."""
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    ext_modules=[CppExtension("torch_neuronx._C", ["torch_neuronx/csrc/neuron.cpp"],
                              extra_compile_args=["-O2", "-std=c++20"])],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
)
