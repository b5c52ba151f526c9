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

from fixtures.tiers import tier_modules, tier_profile
from fixtures.tiers.tier_name import TrainingPath
from fixtures.runs.catalogue import CATALOGUE
from fixtures.data import hf_reference
from fixtures.rank.titan.tiny_qwen3 import qwen3_model_from_hf_config
from fixtures.rank.titan import api

pytestmark = pytest.mark.meta

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402


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


def undefined_configs(profiles) -> list[str]:
    """Every run of the catalogue, on every tier it applies to, whose config function the
    tier's module for its path does not define (``TierProfile.module_for``)."""
    problems = []
    for entry in CATALOGUE:
        for profile in profiles:
            if profile.name not in entry.tiers:
                continue
            spec = entry.build(profile)
            module, defined = profile.module_for(spec.path)
            if spec.config not in defined:
                problems.append(f"{entry.name} on {profile.name}: {module} lacks {spec.config}()")
    return problems


def test_every_run_names_a_config_its_tiers_modules_define(tmp_path):
    """Every run of the catalogue, on every tier it applies to, names a config function its
    tier's module defines (the module's source is the one list: ``fixtures.tiers.tier_modules``);
    a contract's own RunSpec names one the cpu module defines; both paths are used; the trn2
    module defines no config the cpu module lacks (a RunSpec means the same run on both)."""
    profiles = _profiles(tmp_path)
    assert undefined_configs(profiles) == []
    by_name = {p.name: p for p in profiles}
    assert {e.build(by_name[t]).path for e in CATALOGUE for t in e.tiers} == set(TrainingPath)
    for path, names in _contract_spec_configs().items():
        undefined = names - by_name["cpu"].module_for(path)[1]
        assert not undefined, f"{path} configs no tier module defines: {sorted(undefined)}"
    assert by_name["trn2"].module_for(TrainingPath.NATIVE)[1] <= by_name["cpu"].module_for(TrainingPath.NATIVE)[1]


def test_a_config_function_is_what_returns_a_config(tmp_path):
    """What counts as a config function: public, top level, annotated to return a torchtitan
    config class; helpers (private, or returning a model spec) are not; a removed config is
    caught by the catalogue check (the check is not vacuous)."""
    package = tmp_path / "pkg" / "mod"
    package.mkdir(parents=True)
    (package / "config_registry.py").write_text(
        "def _helper() -> Trainer.Config: ...\n"
        "def model_spec(): ...\n"
        "def dense() -> Trainer.Config: ...\n"
        "def backend() -> 'TransformersBackendConfig': ...\n"
        "def shape() -> dict: ...\n")
    assert tier_modules.config_functions("pkg.mod", root=tmp_path) == {"dense", "backend"}
    assert tier_modules.config_functions("pkg.absent", root=tmp_path) is None
    profiles = _profiles(tmp_path)
    real = tier_modules.config_functions
    tier_modules.config_functions.cache_clear()
    try:
        tier_modules.config_functions = lambda module, root=REPO: real(module, root) - {"dense_native_many_layers"}  # noqa: E731
        problems = undefined_configs(profiles)
    finally:
        tier_modules.config_functions = real
    assert "layers_10_to_19 on cpu: fixtures.rank.titan.cpu_qwen3 lacks dense_native_many_layers()" in problems
    assert "layers_10_to_19 on trn2: fixtures.rank.titan.trn2_qwen3 lacks dense_native_many_layers()" in problems


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
