# REHEARSAL STAND-IN of nkilib/core/embeddings/__init__.py (nki-library d2ad3a5), never trn2
# evidence. Empty, as the real one is (licence header only): the kernel is NOT re-exported;
# import it as the submodule: from nkilib.core.embeddings.rope_hf import rope_hf
