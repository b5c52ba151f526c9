"""The Neuron dress-rehearsal stand-ins reproduce the real Neuron layer's documented surface.

The stand-ins (``neuron_standins``) replace only the Neuron layer on a CPU host; they
are never trn2 evidence. These tests hold them to their sources:

- ``nkilib.core.embeddings.rope_hf``: package layout, every ``kernel_assert`` of the real kernel
  (the vendor's own validator, read from the nki-library wheel and run on shapes, decides the
  expected exception and text), fp32 parity with the vendor's pure-torch reference
  ``rope_hf_torch_ref`` (forward, backward, each cache form), bf16 computed in bf16.
- ``torch_neuronx``: ``wrap_nki(kernel)[lnc]`` and its LNC rules (NCC_EVRF066, the runtime's
  NEFF mismatch), ``nki_op`` registration with autograd. Run in subprocesses of the rehearsal
  environment, where the stand-ins are installed (``meta_tests.rehearsal_env``): importing
  ``torch_neuronx`` registers the ``neuron`` device, which must not touch this session.
- ``neuron-ls``: its output parsed by the suite's own regexes (LNC 2 -> 4 cores, 1 -> 8).

In-process imports of the pure-Python stand-ins (nkilib, from its source folder) go through
``standin_nkilib``, which removes them from ``sys.path`` and ``sys.modules`` afterwards, so
nothing leaks into the rest of the session.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import types
import zipfile
from pathlib import Path
from typing import Optional

import pytest
import torch

from fixtures.tiers import neuron_host, topology
from meta_tests import rehearsal_env

pytestmark = pytest.mark.meta

from fixtures.repo import REPO_ROOT  # noqa: E402
STANDIN = REPO_ROOT / "neuron_standins"
STANDIN_PYTHON = STANDIN / "neuronx-cc"  # nkilib and _neuron_rehearsal, pure Python
STANDIN_SOURCES = [STANDIN / "neuronx-cc", STANDIN / "torch-neuronx", STANDIN / "aws-neuronx-tools",
                   STANDIN / "torchtitan-neuron"]
WHEEL = REPO_ROOT.parent / "shared" / "wheels" / "nki_library-0.1.0+gd4920de-py3-none-any.whl"
WHEEL_PKG = "nkilib_src/nkilib/"
STANDIN_MODULES = ("nkilib", "torch_neuronx", "_neuron_rehearsal")
LNC_ENVS = ("NEURON_LOGICAL_NC_CONFIG", "NEURON_CC_FLAGS")


def _need_wheel() -> None:
    if not WHEEL.is_file():
        pytest.skip(f"the nki-library wheel is not at {WHEEL}")


def _wheel_source(member: str) -> str:
    with zipfile.ZipFile(WHEEL) as zf:
        return zf.read(WHEEL_PKG + member).decode()


def _wheel_module(member: str, name: str) -> types.ModuleType:
    """A self-contained module of the wheel (stdlib/torch imports only), without sys.path."""
    module = types.ModuleType(name)
    module.__file__ = f"{WHEEL}/{WHEEL_PKG}{member}"
    exec(compile(_wheel_source(member), module.__file__, "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def vendor():
    """The vendor's own code, from the wheel: kernel_assert, the torch reference, and the
    kernel's input validator (``_validate_apply_rope_inputs``, run on shape-only stand-ins
    with the one ``nl`` constant it reads, ``nl.tile_size.pmax = 128``)."""
    _need_wheel()
    kernel_assert = _wheel_module("core/utils/kernel_assert.py", "vendor_kernel_assert")
    reference = _wheel_module("core/embeddings/rope_hf_torch.py", "vendor_rope_hf_torch")
    source = _wheel_source("core/embeddings/rope_hf.py")
    tree = ast.parse(source)
    validator = next(n for n in tree.body
                     if isinstance(n, ast.FunctionDef) and n.name == "_validate_apply_rope_inputs")
    assert_lines = sorted(
        n.lineno for n in ast.walk(validator)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "kernel_assert"
    )
    failed_lines: list[int] = []

    def recording_assert(condition, error_text):
        if not condition:
            failed_lines.append(sys._getframe(1).f_lineno)
        kernel_assert.kernel_assert(condition, error_text)

    nl = types.SimpleNamespace(ndarray=object, tile_size=types.SimpleNamespace(pmax=128))
    namespace = {"kernel_assert": recording_assert, "nl": nl, "Optional": Optional}
    exec(compile(ast.Module(body=[validator], type_ignores=[]), "rope_hf.py", "exec"), namespace)
    return types.SimpleNamespace(
        kernel_assert=kernel_assert, reference=reference.rope_hf_torch_ref, source=source,
        validate=namespace["_validate_apply_rope_inputs"], assert_lines=assert_lines,
        failed_lines=failed_lines,
    )


@pytest.fixture(scope="module")
def standin_nkilib():
    """The stand-in nkilib, imported afresh in this process and removed again afterwards
    (any copy already imported by someone else is set aside and put back)."""

    def ours(name: str) -> bool:
        return name.split(".")[0] in STANDIN_MODULES

    saved_path = list(sys.path)
    saved_modules = {name: mod for name, mod in sys.modules.items() if ours(name)}
    for name in saved_modules:
        del sys.modules[name]
    sys.path.insert(0, str(STANDIN_PYTHON))
    try:
        import nkilib  # noqa: F401
        from nkilib.core import embeddings
        had_attr_before_submodule = hasattr(embeddings, "rope_hf")
        from nkilib.core.embeddings.rope_hf import rope_hf

        yield types.SimpleNamespace(rope_hf=rope_hf, embeddings=embeddings,
                                    had_attr_before_submodule=had_attr_before_submodule)
    finally:
        sys.path[:] = saved_path
        for name in [n for n in sys.modules if ours(n)]:
            del sys.modules[name]
        sys.modules.update(saved_modules)


@pytest.fixture
def lnc_env(monkeypatch):
    """Set the runtime LNC (and clear the compiler flags) for one in-process launch."""
    for name in LNC_ENVS:
        monkeypatch.delenv(name, raising=False)

    def set_lnc(lnc: int) -> None:
        monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", str(lnc))

    return set_lnc


def _rope_inputs(batch=2, q_heads=4, k_heads=2, seq=256, head_dim=16, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, q_heads, seq, head_dim, generator=gen).to(dtype)
    k = torch.randn(batch, k_heads, seq, head_dim, generator=gen).to(dtype)
    return q, k


def _cache(seq, head_dim, batch=None, seed=1):
    """A real RoPE cache (cos | sin of position * inverse frequency), float32."""
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    pos = torch.arange(seq, dtype=torch.float32)
    if batch is not None:
        pos = pos + torch.arange(batch, dtype=torch.float32)[:, None] * 7  # differ per batch row
        freqs = pos[..., None] * inv
    else:
        freqs = pos[:, None] * inv
    emb = torch.cat((freqs, freqs), dim=-1)
    return torch.cat((emb.cos(), emb.sin()), dim=-1)


# ---------------------------------------------------------------- nkilib: layout


def test_layout_matches_nki_library(standin_nkilib):
    """``embeddings/__init__.py`` is empty, as in nki-library: the kernel is a submodule."""
    assert standin_nkilib.had_attr_before_submodule is False
    assert standin_nkilib.embeddings.__doc__ is None
    init = STANDIN_PYTHON / "nkilib" / "core" / "embeddings" / "__init__.py"
    code = [ln for ln in init.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert code == []
    rope_hf = standin_nkilib.rope_hf
    assert rope_hf.__name__ == "rope_hf" and callable(rope_hf)
    assert rope_hf.__module__ == "nkilib.core.embeddings.rope_hf"
    assert standin_nkilib.embeddings.__name__ == "nkilib.core.embeddings"


def test_real_wheel_has_the_same_layout(vendor):
    _need_wheel()
    init = _wheel_source("core/embeddings/__init__.py")
    assert [ln for ln in init.splitlines() if ln.strip() and not ln.startswith("#")] == []
    assert "def rope_hf(" in vendor.source and "return q_out, k_out" in vendor.source


def test_signature_matches_the_kernel(standin_nkilib, vendor):
    import inspect

    tree = ast.parse(vendor.source)
    real = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "rope_hf")
    real_params = [a.arg for a in real.args.args]
    real_defaults = [ast.literal_eval(d) for d in real.args.defaults]
    sig = inspect.signature(standin_nkilib.rope_hf.func)
    assert list(sig.parameters) == real_params
    assert [p.default for p in sig.parameters.values() if p.default is not inspect._empty] == real_defaults


# ---------------------------------------------------------------- nkilib: validation

def _t(shape):
    return None if shape is None else torch.zeros(shape)


def _shaped(shape):
    return None if shape is None else types.SimpleNamespace(shape=tuple(shape))


# (q, k, cos, sin, rope_cache, lnc): each breaks one rule (or, last ones, several: the first wins)
VALIDATION_CASES = {
    "q not 4D": ((2, 256, 16), (2, 2, 256, 16), None, None, (256, 32), 1),
    "head dim q vs k": ((2, 4, 256, 16), (2, 2, 256, 8), None, None, (256, 32), 1),
    "cache width": ((2, 4, 256, 16), (2, 2, 256, 16), None, None, (256, 30), 1),
    "cache and cos": ((2, 4, 256, 16), (2, 2, 256, 16), (256, 16), None, (256, 32), 1),
    "cache and sin": ((2, 4, 256, 16), (2, 2, 256, 16), None, (256, 16), (256, 32), 1),
    "no cache, no cos/sin": ((2, 4, 256, 16), (2, 2, 256, 16), None, None, None, 1),
    "cos without sin": ((2, 4, 256, 16), (2, 2, 256, 16), (256, 16), None, None, 1),
    "cos vs sin shape": ((2, 4, 256, 16), (2, 2, 256, 16), (256, 16), (128, 16), None, 1),
    "cos head dim": ((2, 4, 256, 16), (2, 2, 256, 16), (256, 8), (256, 8), None, 1),
    "cache batch": ((2, 4, 256, 16), (2, 2, 256, 16), None, None, (3, 256, 32), 1),
    "cache 4D": ((2, 4, 256, 16), (2, 2, 256, 16), None, None, (1, 2, 256, 32), 1),
    "cos batch": ((2, 4, 256, 16), (2, 2, 256, 16), (3, 256, 16), (3, 256, 16), None, 1),
    "cache too short": ((2, 4, 256, 16), (2, 2, 256, 16), None, None, (128, 32), 1),
    "seq not multiple of 128": ((1, 2, 100, 16), (1, 2, 100, 16), None, None, (100, 32), 1),
    "seq not multiple of 256 at LNC=2": ((1, 2, 128, 16), (1, 2, 128, 16), None, None, (128, 32), 2),
    "first failing wins: head dim + seq": ((1, 2, 100, 16), (1, 2, 100, 8), None, None, (100, 32), 1),
    "first failing wins: width + both": ((1, 2, 128, 16), (1, 2, 128, 16), (128, 16), (128, 16),
                                         (128, 31), 1),
    "first failing wins: short + seq at LNC=2": ((1, 2, 384, 16), (1, 2, 384, 16), None, None,
                                                 (256, 32), 2),
}


def _expected_failure(vendor, q, k, cos, sin, cache, lnc):
    try:
        vendor.validate(_shaped(q), _shaped(k), _shaped(cos), _shaped(sin), _shaped(cache), lnc)
    except BaseException as exc:  # whatever the vendor's kernel_assert raises
        return exc
    return None


@pytest.mark.parametrize("case", list(VALIDATION_CASES))
def test_validation_matches_the_real_kernel(case, standin_nkilib, vendor, lnc_env):
    q, k, cos, sin, cache, lnc = VALIDATION_CASES[case]
    expected = _expected_failure(vendor, q, k, cos, sin, cache, lnc)
    assert expected is not None, f"case {case!r} does not fail the real validator"
    lnc_env(lnc)
    qt, kt = _t(q), _t(k)
    with pytest.raises(BaseException) as info:
        standin_nkilib.rope_hf[lnc](qt, kt, torch.empty_like(qt), torch.empty_like(kt),
                                    cos=_t(cos), sin=_t(sin), rope_cache=_t(cache))
    assert type(info.value) is type(expected)
    assert str(info.value) == str(expected)


def test_validation_cases_cover_every_kernel_assert(vendor):
    """Every ``kernel_assert`` of the real validator is the failing one in some case."""
    vendor.failed_lines.clear()
    for q, k, cos, sin, cache, lnc in VALIDATION_CASES.values():
        _expected_failure(vendor, q, k, cos, sin, cache, lnc)
    assert sorted(set(vendor.failed_lines)) == vendor.assert_lines
    assert len(vendor.assert_lines) == 10


def test_kernel_assert_is_an_assert_with_the_vendor_message(standin_nkilib, vendor):
    from nkilib.core.utils import kernel_assert as standin

    for module in (standin, vendor.kernel_assert):
        module.kernel_assert(True, "never shown")
    with pytest.raises(AssertionError) as real:
        vendor.kernel_assert.kernel_assert(False, "some text")
    with pytest.raises(AssertionError) as ours:
        standin.kernel_assert(False, "some text")
    assert str(ours.value) == str(real.value)


def test_valid_inputs_pass_both(standin_nkilib, vendor, lnc_env):
    lnc_env(2)
    assert _expected_failure(vendor, (1, 2, 256, 16), (1, 1, 256, 16), None, None, (1, 512, 32), 2) is None
    q, k = _rope_inputs(batch=1, q_heads=2, k_heads=1)
    standin_nkilib.rope_hf[2](q, k, torch.empty_like(q), torch.empty_like(k), rope_cache=_cache(512, 16, batch=1))


def test_seq_rule_reads_the_launch_grid(standin_nkilib, lnc_env):
    """seq 128 passes at LNC=1 and fails at LNC=2, the grid size being the LNC."""
    q, k = _rope_inputs(batch=1, q_heads=1, k_heads=1, seq=128)
    cache = _cache(128, 16)
    lnc_env(1)
    standin_nkilib.rope_hf[1](q, k, torch.empty_like(q), torch.empty_like(k), rope_cache=cache)
    standin_nkilib.rope_hf(q, k, torch.empty_like(q), torch.empty_like(k), rope_cache=cache)
    lnc_env(2)
    with pytest.raises(AssertionError, match=r"seq len must be multiple of 128 \* LNC=2, got 128"):
        standin_nkilib.rope_hf[2](q, k, torch.empty_like(q), torch.empty_like(k), rope_cache=cache)
    # Un-bracketed at NEURON_LOGICAL_NC_CONFIG=2: the kernel is LNC=2, so the same rule.
    with pytest.raises(AssertionError, match=r"LNC=2, got 128"):
        standin_nkilib.rope_hf(q, k, torch.empty_like(q), torch.empty_like(k), rope_cache=cache)


def test_outside_a_launch_the_kernel_body_sees_one_program(standin_nkilib):
    """Called as plain Python (no launch at all), the body is the non-SPMD program (0, 1, 0)."""
    q, k = _rope_inputs(batch=1, q_heads=1, k_heads=1, seq=128)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    result = standin_nkilib.rope_hf.func(q, k, q_out, k_out, rope_cache=_cache(128, 16))
    assert result[0] is q_out and result[1] is k_out


# ---------------------------------------------------------------- nkilib: math


def _cache_variants(batch, seq, head_dim):
    """(kwargs for rope_hf, kwargs for rope_hf_torch_ref) of each cache form."""
    c2 = _cache(seq, head_dim)
    c3 = _cache(seq, head_dim, batch=batch)
    long2 = _cache(seq + 128, head_dim)
    cos3, sin3 = c3[..., :head_dim].contiguous(), c3[..., head_dim:].contiguous()
    return {
        "cache [seq, 2d]": ({"rope_cache": c2}, {"rope_cache": c2}),
        "cache [batch, seq, 2d]": ({"rope_cache": c3}, {"rope_cache": c3}),
        "cache longer than seq": ({"rope_cache": long2}, {"rope_cache": long2[:seq]}),
        "cos/sin [batch, seq, d]": ({"cos": cos3, "sin": sin3}, {"cos": cos3, "sin": sin3}),
        "cos/sin [seq, d]": ({"cos": c2[:, :head_dim], "sin": c2[:, head_dim:]},
                             {"rope_cache": c2}),
    }


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("lnc", [1, 2])
def test_fp32_parity_with_the_vendor_reference(backward, lnc, standin_nkilib, vendor, lnc_env):
    lnc_env(lnc)
    batch, seq, head_dim = 2, 256, 16
    q, k = _rope_inputs(batch=batch, seq=seq, head_dim=head_dim)
    for name, (ours, theirs) in _cache_variants(batch, seq, head_dim).items():
        q_out, k_out = torch.full_like(q, float("nan")), torch.full_like(k, float("nan"))
        result = standin_nkilib.rope_hf[lnc](q, k, q_out, k_out, backward=backward, **ours)
        ref = vendor.reference(q, k, None, None, backward=backward, **theirs)
        assert isinstance(result, tuple) and result[0] is q_out and result[1] is k_out, name
        torch.testing.assert_close(q_out, ref["q_out"], rtol=0, atol=0, msg=name)
        torch.testing.assert_close(k_out, ref["k_out"], rtol=0, atol=0, msg=name)


def test_backward_is_the_adjoint_of_forward(standin_nkilib, lnc_env):
    """<dy, R x> == <R^T dy, x>: backward=True is the input gradient of the forward rotation."""
    lnc_env(2)
    q, k = _rope_inputs(dtype=torch.float64)
    dq, dk = _rope_inputs(dtype=torch.float64, seed=5)
    cache = _cache(256, 16).double()
    rope = standin_nkilib.rope_hf[2]
    yq, yk = rope(q, k, torch.empty_like(q), torch.empty_like(k), rope_cache=cache)
    gq, gk = rope(dq, dk, torch.empty_like(dq), torch.empty_like(dk), rope_cache=cache, backward=True)
    assert torch.allclose((dq * yq).sum(), (gq * q).sum()) and torch.allclose((dk * yk).sum(), (gk * k).sum())


def test_bf16_is_computed_in_bf16(standin_nkilib, vendor, lnc_env):
    """bf16 in, bf16 arithmetic op by op (as the kernel's bf16 tiles): bit-equal to the vendor's
    reference run in bf16, and not what fp32 arithmetic rounded once to bf16 gives."""
    lnc_env(2)
    q, k = _rope_inputs(dtype=torch.bfloat16, head_dim=64, q_heads=4, k_heads=4)
    cache = _cache(256, 64)
    for backward in (False, True):
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
        standin_nkilib.rope_hf[2](q, k, q_out, k_out, rope_cache=cache, backward=backward)
        assert q_out.dtype == torch.bfloat16 and k_out.dtype == torch.bfloat16
        ref = vendor.reference(q, k, None, None, rope_cache=cache, backward=backward)
        assert torch.equal(q_out, ref["q_out"]) and torch.equal(k_out, ref["k_out"])
        up = vendor.reference(q.float(), k.float(), None, None, rope_cache=cache, backward=backward)
        assert not torch.equal(q_out, up["q_out"].to(torch.bfloat16))


def test_lnc2_shards_write_halves(standin_nkilib, lnc_env):
    """At LNC=2 each of the two programs writes its half of the sequence; together, all of it."""
    q, k = _rope_inputs()
    cache = _cache(256, 16)
    lnc_env(1)
    one = standin_nkilib.rope_hf[1](q, k, torch.empty_like(q), torch.empty_like(k), rope_cache=cache)
    lnc_env(2)
    q_out, k_out = torch.full_like(q, float("nan")), torch.full_like(k, float("nan"))
    two = standin_nkilib.rope_hf[2](q, k, q_out, k_out, rope_cache=cache)
    assert torch.equal(two[0], one[0]) and torch.equal(two[1], one[1])


# ---------------------------------------------------------------- torch_neuronx (subprocess)


def _run_standin(code: str, tmp: Path, env_extra: dict[str, str] | None = None, timeout: int = 300):
    """Run ``code`` in a fresh interpreter of the rehearsal environment (the stand-ins
    installed; the nki-library wheel on its path); its temporary files (torch.compile's too)
    go under ``tmp``."""
    env = {k: v for k, v in os.environ.items() if k not in LNC_ENVS}
    env["TMPDIR"] = str(tmp)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "torchinductor")
    paths = [str(WHEEL)] if WHEEL.is_file() else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [str(REPO_ROOT)])
    env.update(env_extra or {})
    proc = subprocess.run([str(rehearsal_env.require()), "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, cwd=str(REPO_ROOT), timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_wrap_nki_lnc_rules(tmp_path):
    """The grid, NEURON_LOGICAL_NC_CONFIG and NEURON_CC_FLAGS must agree, as documented."""
    code = """
    import json, os, torch, torch_neuronx
    from nkilib.core.embeddings.rope_hf import rope_hf
    scenarios = [  # (env LNC, NEURON_CC_FLAGS, grid or None)
        (None, None, 2), (None, None, 1), (None, None, None), ("2", None, None), ("1", None, 1),
        ("1", None, None), ("1", None, 2), ("2", "--lnc=1", None), ("1", "--logical-nc-config 2", 2),
        ("2", "-O1 -lnc 2", 2), (None, "--lnc 1", 1), ("2", "--lnc=1 --lnc=2", 2),
        (None, None, 8), (None, None, (2, 2)), ("3", None, 2),
    ]
    out = []
    for lnc, flags, grid in scenarios:
        for name, value in (("NEURON_LOGICAL_NC_CONFIG", lnc), ("NEURON_CC_FLAGS", flags)):
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
        q = torch.randn(1, 2, 256, 16); k = torch.randn(1, 1, 256, 16)
        cache = torch.randn(256, 32)
        caller = torch_neuronx.wrap_nki(rope_hf)
        try:
            caller = caller if grid is None else caller[grid]
            qo, ko = caller(q, k, torch.empty_like(q), torch.empty_like(k), rope_cache=cache)
            out.append(["ok", bool(torch.isfinite(qo).all() and torch.isfinite(ko).all())])
        except Exception as exc:
            out.append([type(exc).__name__, str(exc)])
    wrapped = torch_neuronx.wrap_nki(rope_hf)
    try:
        torch_neuronx.wrap_nki(lambda x: x)
        not_a_kernel = "accepted"
    except TypeError:
        not_a_kernel = "TypeError"
    print(json.dumps({"out": out, "default_grid": wrapped.grid, "grid2": wrapped[2].grid,
                      "caller": type(wrapped).__name__, "version": torch_neuronx.__version__,
                      "not_a_kernel": not_a_kernel}))
    """
    res = _run_standin(code, tmp_path)
    evrf = "[NCC_EVRF066] NKI kernel 'rope_hf' is configured with LNC={}, but neuronx-cc is using LNC={}."
    nrt = ("Mismatch detected between Runtime configuration and NEFF. Runtime currently configured "
           "with `NEURON_LOGICAL_NC_CONFIG={}` but NEFF")
    out = res["out"]
    assert out[0] == ["ok", True]                                     # default LNC 2 everywhere
    assert out[1] == ["RuntimeError", evrf.format(1, 2)]              # kernel[1] on trn2's default
    assert out[2] == ["RuntimeError", evrf.format(1, 2)]              # "implicitly defaults to LNC=1"
    assert out[3] == ["ok", True]                                     # env sets the kernel's LNC
    assert out[4] == ["ok", True] and out[5] == ["ok", True]          # LNC=1 everywhere
    assert out[6] == ["RuntimeError", evrf.format(2, 1)]
    assert out[7] == ["RuntimeError", evrf.format(2, 1)]              # EVRF066's NEURON_CC_FLAGS cause
    assert out[8][0] == "RuntimeError" and out[8][1].startswith(nrt.format(1))
    assert out[8][1].endswith("was compiled with `--lnc=2`. To resolve, either recompile the NEFF "
                              "with `--lnc=1` or re-run with `NEURON_LOGICAL_NC_CONFIG=2`.")
    assert out[9] == ["ok", True]                                     # -lnc spelling
    assert out[10][0] == "RuntimeError" and out[10][1].startswith(nrt.format(2))
    assert out[11] == ["ok", True]                                    # last flag wins
    assert out[12][0] == "ValueError" and out[13][0] == "ValueError"  # grid 8, two-number grid
    assert out[14][0] == "RuntimeError" and "LNC can only be set to 1 or 2" in out[14][1]
    assert res["default_grid"] == [] and res["grid2"] == [2] and res["caller"] == "NKIHOPCaller"
    assert res["version"].startswith("2.14.3.0") and res["not_a_kernel"] == "TypeError"


def test_nki_op_registers_a_custom_op_with_autograd(tmp_path):
    """``@nki_op`` around ``wrap_nki(rope_hf)[2]``: a torch.library op, autograd through
    ``register_autograd`` calling the kernel with backward=True, usable under torch.compile;
    and ``wrap_nki(rope_hf)[2](...)`` called straight from a fullgraph-compiled function."""
    _need_wheel()  # the subprocess imports the vendor reference from the wheel
    code = """
    import json, torch, torch_neuronx
    from torch_neuronx import nki_op, wrap_nki
    from nkilib.core.embeddings.rope_hf import rope_hf
    from nkilib_src.nkilib.core.embeddings.rope_hf_torch import rope_hf_torch_ref

    def call(q, k, cache, backward):
        return wrap_nki(rope_hf)[2](q, k, torch.empty_like(q), torch.empty_like(k),
                                    rope_cache=cache, backward=backward)

    @nki_op("rehearsal_standin_test::rope", mutates_args={})
    def rope(q: torch.Tensor, k: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return call(q, k, cache, False)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[2])

    def backward(ctx, gq, gk):
        (cache,) = ctx.saved_tensors
        dq, dk = call(gq.contiguous(), gk.contiguous(), cache, True)
        return dq, dk, None

    rope.register_autograd(backward, setup_context=setup_context)

    torch.manual_seed(0)
    q = torch.randn(1, 2, 256, 16, requires_grad=True)
    k = torch.randn(1, 1, 256, 16, requires_grad=True)
    cache = torch.randn(256, 32)
    yq, yk = rope(q, k, cache)
    ref = rope_hf_torch_ref(q.detach(), k.detach(), None, None, rope_cache=cache)
    gq_out, gk_out = torch.randn_like(yq), torch.randn_like(yk)
    gq, gk = torch.autograd.grad((yq, yk), (q, k), (gq_out, gk_out))
    # autograd through the reference's own forward gives the true input gradients
    q2, k2 = q.detach().requires_grad_(), k.detach().requires_grad_()
    r2 = rope_hf_torch_ref(q2, k2, None, None, rope_cache=cache)
    tq, tk = torch.autograd.grad((r2["q_out"], r2["k_out"]), (q2, k2), (gq_out, gk_out))
    compiled = torch.compile(lambda a, b, c: rope(a, b, c), backend="aot_eager", fullgraph=True)
    cq, ck = compiled(q.detach(), k.detach(), cache)
    # a kernel launched straight from a compiled region stays in the graph (fullgraph)
    direct = torch.compile(lambda a, b, c: call(a, b, c, False), backend="aot_eager", fullgraph=True)
    dq_, dk_ = direct(q.detach(), k.detach(), cache)
    torch.library.opcheck(rope, (q.detach(), k.detach(), cache),
                          test_utils=("test_schema", "test_faketensor"))
    print(json.dumps({
        "type": type(rope).__name__,
        "op": str(torch.ops.rehearsal_standin_test.rope.default),
        "fwd": max(float((yq - ref["q_out"]).abs().max()), float((yk - ref["k_out"]).abs().max())),
        "bwd": max(float((gq - tq).abs().max()), float((gk - tk).abs().max())),
        "compiled": bool(torch.equal(cq, yq.detach()) and torch.equal(ck, yk.detach())),
        "direct": bool(torch.equal(dq_, yq.detach()) and torch.equal(dk_, yk.detach())),
    }))
    """
    res = _run_standin(code, tmp_path, {"NEURON_LOGICAL_NC_CONFIG": "2"})
    assert res["type"] == "CustomOpDef"
    assert res["op"] == "rehearsal_standin_test.rope.default"
    assert res["fwd"] == 0.0 and res["bwd"] < 1e-6 and res["compiled"] and res["direct"]


def test_torch_neuronx_import_registers_the_neuron_device(tmp_path):
    code = """
    import json, torch
    import torch_neuronx
    x = torch.ones(2, device="neuron")
    print(json.dumps({"device": x.device.type, "backend": torch._C._get_privateuse1_backend_name(),
                      "version": torch_neuronx.__version__, "standin": torch_neuronx.REHEARSAL_STANDIN}))
    """
    res = _run_standin(code, tmp_path, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
                                        "NEURON_REHEARSAL_LOCK_DIR": str(tmp_path / "locks")})
    assert res == {"device": "neuron", "backend": "neuron", "version": "2.14.3.0+rehearsal", "standin": True}


# ---------------------------------------------------------------- neuron-ls


def _neuron_ls() -> Path:
    """The stand-in neuron-ls, as the rehearsal environment installs it (bin/neuron-ls)."""
    rehearsal_env.require()
    return rehearsal_env.NEURON_LS


@pytest.mark.parametrize("lnc, cores", [(None, 4), ("2", 4), ("1", 8)])
def test_neuron_ls_output_parses_as_a_trn2_3xlarge(lnc, cores):
    env = {k: v for k, v in os.environ.items() if k not in LNC_ENVS}
    if lnc is not None:
        env["NEURON_LOGICAL_NC_CONFIG"] = lnc
    proc = subprocess.run([str(_neuron_ls())], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    instance = neuron_host._INSTANCE_RE.search(out).group(1)
    ls_lnc = int(neuron_host._LNC_RE.search(out).group(1))
    assert instance == "trn2.3xlarge" and ls_lnc == int(lnc or 2)
    rows = [ln for ln in out.splitlines() if ln.startswith("| 0 ")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[:4] == ["0", str(cores), f"0-{cores - 1}", "96 GB"]
    assert int(cells[1]) == topology.logical_cores(instance, ls_lnc)


def test_neuron_ls_matches_the_real_trn2_3xlarge_table():
    """The table of a real trn2.3xlarge at LNC=2 (as published verbatim), line for line."""
    env = {k: v for k, v in os.environ.items() if k not in LNC_ENVS}
    out = subprocess.run([str(_neuron_ls())], capture_output=True, text=True, env=env,
                         timeout=60).stdout.splitlines()
    assert out[0] == "instance-type: trn2.3xlarge"
    assert out[1].startswith("instance-id: i-")
    assert out[2:] == [
        "logical-neuroncore-config: 2",
        "+--------+--------+----------+--------+--------------+----------+------+",
        "| NEURON | NEURON |  NEURON  | NEURON |     PCI      |   CPU    | NUMA |",
        "| DEVICE | CORES  | CORE IDS | MEMORY |     BDF      | AFFINITY | NODE |",
        "+--------+--------+----------+--------+--------------+----------+------+",
        "| 0      | 4      | 0-3      | 96 GB  | 0000:33:00.0 | 0-11     | 0    |",
        "+--------+--------+----------+--------+--------------+----------+------+",
    ]


def test_neuron_ls_refuses_an_unsupported_lnc():
    env = {k: v for k, v in os.environ.items() if k not in LNC_ENVS}
    env["NEURON_LOGICAL_NC_CONFIG"] = "4"
    proc = subprocess.run([str(_neuron_ls())], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode != 0 and "not 1 or 2" in proc.stderr


def test_every_standin_module_says_it_is_a_rehearsal_standin():
    """Every module of every stand-in distribution, its build script, and its C++ source."""
    paths = [p for root in STANDIN_SOURCES for p in sorted(root.rglob("*.py")) if "build" not in p.parts]
    assert len(paths) >= 15
    for cpp in [p for root in STANDIN_SOURCES for p in root.rglob("*.cpp")]:
        assert "REHEARSAL STAND-IN" in cpp.read_text()[:400], cpp
    for path in paths:
        text = path.read_text()
        if path.name == "__init__.py" and path.parent.name in ("core", "embeddings") \
                and path.parent.parent.name in ("nkilib", "core"):
            assert "REHEARSAL STAND-IN" in text  # empty packages: a comment, no docstring
            continue
        tree = ast.parse(text)
        doc = ast.get_docstring(tree) or ""
        assert "REHEARSAL STAND-IN" in doc, path
