"""REHEARSAL STAND-IN of ``nkilib.core.utils.kernel_assert``, never trn2 evidence.

Source: aws-neuron/nki-library d2ad3a5, ``nkilib/core/utils/kernel_assert.py`` (in the wheel
``nki_library-0.1.0+gd4920de``: ``nkilib_src/nkilib/core/utils/kernel_assert.py``). Facts
reproduced: a failed check is a plain ``assert`` (so it raises ``AssertionError``, and is
skipped under ``python -O``), its message is ``[INTERNAL_ERROR] [NCC_INKI016] Kernel
validation exception: <text> - Please check the validation message and adjust kernel inputs
accordingly``; ``assert_shape`` reports "Received unexpected shape for <name>. Expected <e>,
received <r>. <text>".
"""


def kernel_assert(condition: bool, error_text: str) -> None:
    assert condition, (  # noqa: S101  (an assert, as in the real helper)
        "[INTERNAL_ERROR] [NCC_INKI016] Kernel validation exception: "
        f"{error_text} - Please check the validation message and adjust kernel inputs accordingly"
    )


def assert_shape(tensor, expected_shape, tensor_name, error_text=""):
    shape = tuple(tensor.shape)
    kernel_assert(
        shape == tuple(expected_shape),
        f"Received unexpected shape for {tensor_name}. "
        f"Expected {tuple(expected_shape)}, received {shape}. {error_text}",
    )
