"""The torchtitan modules each tier launches define every config its profile declares, and
every run the suite defines names a declared config. Torch-free: module sources are read
with ``ast``, never imported (a trn2 module imports torch_neuronx)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.tiers import tier_profile
from fixtures.runs.catalogue import CATALOGUE
from fixtures.data import hf_reference
from fixtures.rank.titan.tiny_qwen3 import qwen3_model_from_hf_config
from fixtures.rank.titan import api

pytestmark = pytest.mark.meta

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402


def _functions_of(module: str) -> set[str]:
    """Top-level function names of a module (``pkg.mod`` or a package's config_registry)."""
    path = REPO / Path(*module.split("."))
    source = path / "config_registry.py" if path.is_dir() else path.with_suffix(".py")
    tree = ast.parse(source.read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    init = path / "__init__.py"
    if path.is_dir() and init.exists():  # a package re-exporting its registry
        names |= {n.name for n in ast.parse(init.read_text()).body if isinstance(n, ast.FunctionDef)}
    return names


def _profiles(tmp_path: Path) -> list[tier_profile.TierProfile]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({  # Qwen3-4B's shape
        "model_type": "qwen3", "vocab_size": 151936, "num_hidden_layers": 36, "hidden_size": 2560,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 9728}))
    return [tier_profile.cpu_profile(), tier_profile.trn2_profile("trn2.48xlarge", 2, model)]


def _contract_spec_configs() -> dict[str, set[str]]:
    """Every ``config="..."`` a contract gives a RunSpec of its own (one the harness refuses
    before any launch), by path ("native" unless ``path=`` says otherwise)."""
    found: dict[str, set[str]] = {"native": set(), "hf_backend": set()}
    for f in sorted((REPO / "conformance").glob("test_*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "RunSpec":
                kw = {k.arg: k.value for k in node.keywords}
                config = kw.get("config")
                if isinstance(config, ast.Constant):
                    path = kw.get("path").value if isinstance(kw.get("path"), ast.Constant) else "native"
                    found[path].add(config.value)
    return found


def missing_configs(profiles) -> list[str]:
    problems = []
    for profile in profiles:
        for path in ("native", "hf_backend"):
            module, declared = profile.module_for(path)
            defined = _functions_of(module)
            problems += [f"{profile.name}: {module} lacks {name}()" for name in declared if name not in defined]
    return problems


def test_every_declared_config_exists_in_its_tier_module(tmp_path):
    assert missing_configs(_profiles(tmp_path)) == []


def test_every_run_names_a_config_its_tiers_declare(tmp_path):
    """Every run of the catalogue, on every tier it applies to, names a config that tier's
    module declares; a contract's own RunSpec names one the cpu tier declares."""

    profiles = {p.name: p for p in _profiles(tmp_path)}
    paths = set()
    for entry in CATALOGUE:
        for name in entry.tiers:
            spec = entry.build(profiles[name])
            paths.add(spec.path)
            module, declared = profiles[name].module_for(spec.path)
            assert spec.config in declared, f"{entry.name} on {name}: {module} lacks {spec.config}()"
    assert paths == {"native", "hf_backend"}, paths
    for path, names in _contract_spec_configs().items():
        undeclared = names - set(profiles["cpu"].module_for(path)[1])
        assert not undeclared, f"{path} configs no tier module declares: {sorted(undeclared)}"
    assert set(profiles["trn2"].native_configs) <= set(profiles["cpu"].native_configs)


def test_a_removed_config_is_caught(tmp_path, monkeypatch):
    """The check is not vacuous: a tier module without one of its declared configs fails it."""
    real = _functions_of
    monkeypatch.setattr(sys.modules[__name__], "_functions_of",
                        lambda module: real(module) - {"dense_native_many_layers"})
    problems = missing_configs(_profiles(tmp_path))
    assert "trn2: fixtures.rank.titan.trn2_qwen3 lacks dense_native_many_layers()" in problems
    assert "cpu: fixtures.rank.titan.cpu_qwen3 lacks dense_native_many_layers()" in problems


def test_profile_and_probe_names_need_no_torch():
    """The tier profile and the probe file names import without torch (the harness reads a
    run, and the meta tests check the modules, on any machine)."""
    code = ("import sys; import fixtures.tiers.tier_profile, fixtures.rank.probes.registry, fixtures.rank.run_files, fixtures.tiers.rehearsal; "
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_final_state_is_read_into_the_model_the_checkpoint_describes(tmp_path):
    """The trained-export contract rebuilds torchtitan's model from the checkpoint's own
    config.json (not the cpu tier's tiny shape) before a strict load: a checkpoint of
    another shape (here 3 layers, vocab 600, untied) loads, and a wrong state is refused."""
    import torch


    hf = {"model_type": "qwen3", "vocab_size": 600, "hidden_size": 32, "intermediate_size": 64,
          "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
          "max_position_embeddings": 512, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
          "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    source = qwen3_model_from_hf_config(hf).build()
    source.init_weights(buffer_device=torch.device("cpu"))
    model = hf_reference.titan_model_from_state(source.state_dict(), tmp_path)
    assert len(model.layers) == 3 and model.tok_embeddings.weight.shape == (600, 32)
    broken = dict(source.state_dict())
    broken.pop("lm_head.weight")
    with pytest.raises(RuntimeError, match="lm_head.weight"):
        hf_reference.titan_model_from_state(broken, tmp_path)


def test_the_api_detection_cache_is_keyed_by_the_sources_it_reads(tmp_path, monkeypatch):
    """detect() keeps its answer on disk under a key of torchtitan/config/override.py and
    configs.py: the same sources read the cached answer, a changed source is a new key (a
    stale answer cannot be read), and a fresh key detects by importing."""
    import importlib.util
    import json
    import types


    package = tmp_path / "torchtitan"
    (package / "config").mkdir(parents=True)
    (package / "config" / "override.py").write_text("def override(name, *, target): ...\n")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: types.SimpleNamespace(
        submodule_search_locations=[str(package)]))
    monkeypatch.setattr(api, "DETECTION_CACHE", tmp_path / "cache")
    key = api._detection_key()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{key}.json").write_text(json.dumps(
        {"named": True, "function_imports": False, "dtensor_tp_backend": "from-the-cache"}))
    api.detect.cache_clear()
    try:
        assert api.detect().dtensor_tp_backend == "from-the-cache"
        (package / "config" / "override.py").write_text("def override(*, target): ...\n")
        assert api._detection_key() != key
        api.detect.cache_clear()
        monkeypatch.setattr(api, "_detect_by_import", lambda: api.OverrideAPI(False, True, "imported"))
        assert api.detect().dtensor_tp_backend == "imported"
        assert (tmp_path / "cache" / f"{api._detection_key()}.json").is_file()
    finally:
        api.detect.cache_clear()
