# REHEARSAL STAND-IN of nkilib/core/__init__.py (nki-library d2ad3a5), never trn2 evidence.
# Empty, as the real one is (it holds only the licence header): no docstring, no imports.
