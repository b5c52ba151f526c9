"""Where a session's report folder keeps what (one place, read by the report and the bundles)."""

from __future__ import annotations

from pathlib import Path


def run_record_path(report_dir: Path, key: str) -> Path:
    """The record of run ``key`` (``RunResult.to_json``, the same as the cache's result.json)."""
    return Path(report_dir) / "runs" / f"{key}.json"


def bundle_dir(report_dir: Path, name: str) -> Path:
    """The repro bundle of one failed contract."""
    return Path(report_dir) / "repro" / name
