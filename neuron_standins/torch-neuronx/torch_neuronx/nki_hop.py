"""REHEARSAL STAND-IN of ``torch_neuronx``'s NKI plumbing (``wrap_nki``, ``nki_op``), never trn2 evidence.

- ``wrap_nki(kernel)`` returns an ``NKIHOPCaller``; ``NKIHOPCaller[grid](*args, **kwargs)``
  launches the kernel with that launch grid (the LNC degree); without brackets the grid is
  empty. Sources: aws-neuron/aws-neuron-sdk (mirror at 81ce03ae, 2026-08-21)
  ``vllm-neuron/docs/model-dev/nki_cpu_simulator.md`` and ``.../cpu-development.md``
  ("wrap_nki(kernel) -> NKIHOPCaller", "NKIHOPCaller[grid](**kwargs)", and the CPU dispatch
  receives ``lnc``); CONTRACTS.md "The NKI RoPE kernel" ("launch grid given as
  ``wrap_nki(k)[lnc]``"); the import ``from torch_neuronx import nki_op, wrap_nki`` and the
  un-bracketed call ``wrap_nki(add_kernel)(x1, x2, y)`` inside an ``@nki_op`` body appear in
  torch-neuronx's own test of NKI V2 kernels (public copy found in the code index;
  aws-neuron/torch-neuronx itself could not be fetched). Public user notes describe the
  caller's ``grid`` as defaulting to ``[]``. The name ``torch_neuronx.nki_hop`` (this module)
  is the import path those notes use too.
- The launch (grid, LNC checks against ``NEURON_LOGICAL_NC_CONFIG`` / ``NEURON_CC_FLAGS``,
  NCC_EVRF066 and the runtime's NEFF mismatch) is ``_neuron_rehearsal.launch``; its module
  docstring names the source of each rule and message.
- ``nki_op(name, fn=None, mutates_args=())`` registers the decorated Python function (which
  calls the kernel) as a PyTorch custom operator through the real ``torch.library.custom_op``
  and returns its ``CustomOpDef`` (so ``.register_autograd(...)`` / ``.register_fake(...)``
  are PyTorch's own). Sources: mirror ``nki/get-started/about/index.rst`` (``from
  torch_neuronx import nki_op``; ``@nki_op("mylib::my_op", mutates_args={})`` on a function
  with type annotations, then called as ``my_op(x)``); docs latest
  ``torch/guides/how-to-work-with-nki.rst`` (keywords: nki_op, custom op, mutates_args,
  register_autograd, torch.compile; only its opening could be read); CONTRACTS.md
  (``torch_neuronx.nki_op(name)`` "registers it as a custom operator (a torch.library custom
  op)", ``.register_autograd(...)``); a public torch-neuronx 2.9 compatibility shim that
  describes 2.11's ``nki_op(name, fn=None, mutates_args={})`` as registering the op body
  ``fn`` itself as the Fake kernel too (done here as well). The default of ``mutates_args``
  comes from that shim; whether the real one requires it is not documented.
  Differences: the real op is registered for the ``neuron`` device; this one registers for
  every device type (the same op runs on ``neuron`` tensors in a rank and on CPU ones in the
  stand-in's own tests).

Not reproduced: the HigherOrderOperator itself (``nki_kernel_wrapper``), its fake-tensor
shape inference, input/output aliasing analysis, compilation; ``wrap_nki`` accepts only the
rehearsal's stand-in kernels (there is no stand-in of ``nki``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from _neuron_rehearsal import launch as _launch


class NKIHOPCaller:
    """``wrap_nki(kernel)``: call it to launch with an empty grid, or ``[grid]`` it first."""

    def __init__(self, kernel: _launch.NKIKernel, grid: Any = ()):
        self.kernel = kernel
        self.grid = [] if grid in ((), [], None) else list(_launch.normalize_grid(grid))

    def __getitem__(self, grid) -> NKIHOPCaller:
        return NKIHOPCaller(self.kernel, grid)

    def __call__(self, *args, **kwargs):
        return _launch.launch(self.kernel, tuple(self.grid), args, kwargs)

    def __repr__(self) -> str:
        return f"<rehearsal NKIHOPCaller {self.kernel.__name__} grid={self.grid}>"


def wrap_nki(kernel) -> NKIHOPCaller:
    """Turn an NKI kernel into a PyTorch callable; ``wrap_nki(k)[lnc](...)`` sets the launch grid."""
    if not isinstance(kernel, _launch.NKIKernel):
        raise TypeError(
            f"wrap_nki expects an NKI kernel (a function decorated with @nki.jit), got "
            f"{kernel!r}; the rehearsal stand-in can launch only the stand-in kernels of "
            f"neuron_standins (wording ours)"
        )
    return NKIHOPCaller(kernel)


def nki_op(name: str, fn: Callable | None = None, mutates_args: str | Iterable[str] = ()):
    """Register ``fn`` (a function calling an NKI kernel) as the custom operator ``name``.

    Used as ``@nki_op("ns::op", mutates_args={...})``; returns ``torch.library.custom_op``'s
    ``CustomOpDef`` with ``fn`` also registered as its fake implementation.
    """

    def register(func: Callable):
        op = torch.library.custom_op(name, func, mutates_args=mutates_args)
        op.register_fake(func)
        return op

    return register if fn is None else register(fn)
