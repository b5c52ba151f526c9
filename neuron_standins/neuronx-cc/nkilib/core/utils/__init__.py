"""REHEARSAL STAND-IN of ``nkilib.core.utils`` (nki-library d2ad3a5), never trn2 evidence.

Only ``kernel_assert`` and the sharding helpers of ``kernel_helpers`` that ``rope_hf`` uses.
"""
