"""The numerics policy says, for every tolerance, what it compares, and bit for bit only where
that can hold on any machine (issue 41: a 0.0 between two computations held on one CPU's
kernels only, and the README's first command failed on another machine)."""

from __future__ import annotations

import dataclasses

import pytest

from fixtures.oracles import numerics
from fixtures.oracles.numerics import CPU_NUMERICS, KIND_OF, TRN2_NUMERICS, Exactness

pytestmark = pytest.mark.meta


def test_every_tolerance_says_what_it_compares():
    tolerance_fields = {f.name for f in dataclasses.fields(numerics.Numerics)} - {"dtype", "source", "kernel_paths_vary"}
    assert set(KIND_OF) == tolerance_fields


def test_on_cpu_only_the_same_computation_twice_is_bit_for_bit():
    zero = {name for name, (value, _) in CPU_NUMERICS.tolerances().items()
            if not any(value if isinstance(value, tuple) else (value,))}
    assert zero and all(KIND_OF[name] is Exactness.SAME_COMPUTATION for name in zero), zero
    with pytest.raises(ValueError, match="same_math_rtol = 0.0: bit for bit is a promise only the same computation"):
        dataclasses.replace(CPU_NUMERICS, same_math_rtol=0.0)
    with pytest.raises(ValueError, match="provider_atol"):
        dataclasses.replace(CPU_NUMERICS, provider_atol=0.0)


def test_trn2_keeps_the_writeups_measured_zero_on_its_one_device():
    assert TRN2_NUMERICS.provider_atol == 0.0 and not TRN2_NUMERICS.kernel_paths_vary


def test_the_ci_machine_matrix_runs_the_contracts_that_compare_two_computations():
    """CI reruns, under another kernel path, the contracts the exactness benchmark holds to a
    SAME_MATH tolerance that launch few runs (accumulation, rank scaling and compile only in the
    benchmark: their runs cost the most and their tolerances are 50x their figures)."""
    from pathlib import Path

    from benchmarks.exactness_by_capability import EXACTNESS

    listed = [line for line in (Path(__file__).parent.parent / "scripts" / "exactness-sample.txt").read_text().splitlines()
              if line and not line.startswith("#")]
    assert listed and all(KIND_OF[EXACTNESS[nodeid]] is Exactness.SAME_MATH for nodeid in listed)
    assert {"same_math_rtol", "provider_atol"} <= {EXACTNESS[n] for n in listed}
