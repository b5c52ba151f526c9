"""A Qwen3-4B-Instruct-2507 model folder for the meta tests: the model's published config.json
(``fixtures.rank.model_shapes.QWEN3_4B_INSTRUCT_2507``), no weights; and a trn2 profile on it."""

from __future__ import annotations

import json
from pathlib import Path

from fixtures.rank.model_shapes import QWEN3_4B_INSTRUCT_2507
from fixtures.tiers import tier_profile


def model_folder(tmp_path: Path, **changes) -> Path:
    """``tmp_path/Qwen3-4B-Instruct-2507`` with its config.json (``changes`` over its keys)."""
    folder = tmp_path / "Qwen3-4B-Instruct-2507"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**QWEN3_4B_INSTRUCT_2507, **changes}))
    return folder


def trn2_tier(tmp_path: Path) -> tier_profile.TierProfile:
    """The trn2 profile of a trn2.48xlarge at LNC=2 training that model."""
    return tier_profile.trn2_profile("trn2.48xlarge", 2, model_folder(tmp_path))
