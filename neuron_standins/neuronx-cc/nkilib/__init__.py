"""REHEARSAL STAND-IN of ``nkilib`` (NKI Library), never trn2 evidence.

Reproduces the package layout of aws-neuron/nki-library at commit d2ad3a5 (2026-04-13), as
shipped in ``/work/shared/wheels/nki_library-0.1.0+gd4920de-py3-none-any.whl`` (top package
``nkilib_src.nkilib``; bundled in neuronx-cc as ``nkilib``). Only what the conformance suite
calls exists here: ``nkilib.core.embeddings.rope_hf.rope_hf`` and the two helpers it uses
(``nkilib.core.utils.kernel_assert``, part of ``nkilib.core.utils.kernel_helpers``).

Like the real ``nkilib/__init__.py`` (which imports every top-level submodule on import),
importing ``nkilib`` imports ``nkilib.core``; ``nkilib/core/__init__.py`` and
``nkilib/core/embeddings/__init__.py`` are empty there and here, so the kernel is reached only
as the submodule ``nkilib.core.embeddings.rope_hf``. Not reproduced: the swap of the bundled
``nkilib`` for a standalone ``nkilib_src`` (``NKILIB_FORCE_BUNDLED_LIBRARY``), every other
kernel. See ``neuron_standins/README.md``.
"""

from . import core  # noqa: F401  (the real __init__ imports its top-level submodules)
