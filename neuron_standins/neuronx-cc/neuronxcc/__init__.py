"""REHEARSAL STAND-IN of the neuronx-cc compiler package: its version only, no compiler.

The real ``neuronx-cc`` distribution installs ``neuronxcc`` (the compiler) and bundles
``nkilib`` (CONTRACTS.md "The NKI RoPE kernel"); this stand-in bundles the stand-in nkilib and
compiles nothing: the rehearsal runs every captured graph with ``aot_eager``.
"""

__version__ = "2.28.7631.0+rehearsal"
REHEARSAL_STANDIN = True
