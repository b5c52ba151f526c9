"""A run's identity (the run cache's key) changes with everything that can change the run."""

from __future__ import annotations

import json
import os
import sys

import pytest

from fixtures.runs import cache as run_cache
from fixtures.runs.cache import RunCache
from fixtures.data.assets import Assets
from fixtures.runs.inputs import RunInputs
from fixtures.runs.catalogue import DENSE_NATIVE
from fixtures.tiers.tier_profile import cpu_profile, trn2_profile

pytestmark = pytest.mark.meta


def _key(tmp_path, tier=None, **kwargs) -> str:
    cache = RunCache(tmp_path / "runs", RunInputs(tier or cpu_profile(), Assets(tmp_path / "assets-x"), tmp_path),
                     **kwargs)
    return cache.key(DENSE_NATIVE, cache.inputs_of(DENSE_NATIVE))


def test_a_neuron_setting_is_part_of_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv("NEURON_RT_LOG_LEVEL", raising=False)
    monkeypatch.delenv("NEURON_COMPILE_CACHE_URL", raising=False)
    plain = _key(tmp_path)
    monkeypatch.setenv("NEURON_RT_LOG_LEVEL", "INFO")
    assert _key(tmp_path) != plain
    monkeypatch.delenv("NEURON_RT_LOG_LEVEL")
    monkeypatch.setenv("NEURON_COMPILE_CACHE_URL", str(tmp_path / "neff"))
    assert _key(tmp_path) != plain


def test_the_model_folders_files_are_part_of_the_key(tmp_path):
    folder = tmp_path / "Qwen3-4B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "vocab_size": 64, "num_hidden_layers": 2, "hidden_size": 8,
        "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16,
        "max_position_embeddings": 64, "rope_theta": 1e6, "rms_norm_eps": 1e-6}))
    (folder / "model.safetensors").write_bytes(b"x" * 10)
    tier = trn2_profile("trn2.3xlarge", 2, folder)
    before = _key(tmp_path, tier)
    (folder / "model.safetensors").write_bytes(b"y" * 11)  # a re-download
    assert _key(tmp_path, tier) != before


def test_a_locally_patched_installed_package_changes_its_stamp(tmp_path, monkeypatch):
    package = tmp_path / "site" / "fakepkg_for_identity"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    before = run_cache.installed_tree_stamp(("fakepkg_for_identity",))
    (package / "__init__.py").write_text("x = 22\n")  # same version, edited in place
    os.utime(package / "__init__.py", ns=(1, 1))
    after = run_cache.installed_tree_stamp(("fakepkg_for_identity",))
    assert before and after and before != after
    assert set(run_cache.installed_tree_stamp()) >= {"torch", "torchtitan", "transformers"}
    sys.modules.pop("fakepkg_for_identity", None)
