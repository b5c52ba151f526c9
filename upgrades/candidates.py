"""What a user hands the upgrade check as a candidate, parsed into what pip installs.

Every form a Trainium user meets is one change:

- ``name==version``: a release from an index (``--extra-index-url``/``--find-links`` reach
  AWS's Neuron index or a wheelhouse);
- a wheel file (``torchtitan-0.2.2+gitb5bcd76-py3-none-any.whl``): name and version from its
  file name (PEP 427), the commit from a ``+git<sha>``/``+g<sha>`` local label;
- ``name @ git+URL@commit`` or ``name @ file:///...``: a direct reference (PEP 440/508);
- a local checkout (a folder with ``pyproject.toml`` or ``setup.py``), installed editable as
  the Neuron fork is (``pip install -e``), its commit and date from ``git``;
- a candidate set file (``--candidate-set``): a Neuron release's pins, like the committed
  ``reports/baselines/trn2-neuron-2.33.0.pins.json`` (its ``packages``), or ``{"candidates":
  [any of the above]}``.

Anything else (a version range, a bare name, a path that does not exist) is a
``CandidateUsageError``: one line, exit 2, never a traceback.
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

LOCAL_COMMIT = re.compile(r"^(?:git|g)([0-9a-f]{7,40})$")
HEX = re.compile(r"^[0-9a-f]{7,40}$")


class CandidateUsageError(ValueError):
    """A candidate the upgrade check cannot take, said in one line (exit status 2)."""


@dataclass(frozen=True)
class Candidate:
    text: str  # as the user wrote it
    kind: str  # "index", "wheel", "direct" or "checkout"
    name: str  # canonical distribution name
    install: tuple[str, ...]  # pip install arguments for it
    version: str | None = None  # known before installing (index, wheel)
    commit: str | None = None
    date: str | None = None  # the commit's date, where a repository says it

    def describe(self) -> str:
        bits = [self.name]
        if self.version:
            bits.append(self.version)
        if self.commit:
            bits.append(f"commit {self.commit[:10]}" + (f" ({self.date[:10]})" if self.date else ""))
        where = {"index": "from the index", "wheel": "wheel file", "direct": "direct reference",
                 "checkout": "local checkout, editable"}[self.kind]
        return " ".join(bits) + f" [{where}]"

    def to_json(self) -> Mapping[str, Any]:
        return asdict(self)


def git_commit_and_date(repo: Path, rev: str = "HEAD") -> tuple[str | None, str | None]:
    """(full commit, committer date ISO 8601) of ``rev`` in ``repo``; (None, None) where it is
    not a repository or does not hold the commit."""
    proc = subprocess.run(["git", "-C", str(repo), "show", "-s", "--format=%H %cI", rev],
                          capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        return None, None
    commit, date = proc.stdout.split()
    return commit, date


def _checkout_name(folder: Path) -> str:
    pyproject = folder / "pyproject.toml"
    if pyproject.exists():
        try:
            name = tomllib.loads(pyproject.read_text()).get("project", {}).get("name")
        except tomllib.TOMLDecodeError as exc:
            raise CandidateUsageError(f"{pyproject} is not valid TOML: {exc}") from None
        if name:
            return canonicalize_name(name)
    raise CandidateUsageError(f"{folder}: a checkout candidate needs pyproject.toml with [project].name")


def parse(text: str, *, git_repo: Path | None = None, base: Path | None = None) -> Candidate:
    """One candidate from what the user typed (see the module docstring). ``git_repo``: a
    repository to read the date of a commit named by a wheel or a direct reference."""
    text = text.strip()
    base = base or Path.cwd()
    path = (base / text).expanduser() if not text.startswith("/") else Path(text)
    if text.endswith(".whl"):
        if not path.is_file():
            raise CandidateUsageError(f"candidate {text!r}: no such wheel file")
        try:
            name, version, _, _ = parse_wheel_filename(path.name)
        except InvalidWheelFilename as exc:
            raise CandidateUsageError(f"candidate {text!r}: {exc}") from None
        local = LOCAL_COMMIT.match(version.local or "")
        commit = local.group(1) if local else None
        date = None
        if commit and git_repo is not None:
            commit, date = git_commit_and_date(git_repo, commit)
            commit = commit or local.group(1)
        return Candidate(text, "wheel", canonicalize_name(name), (str(path.resolve()),), str(version),
                         commit, date)
    if "@" not in text and path.is_dir():
        if not ((path / "pyproject.toml").exists() or (path / "setup.py").exists()):
            raise CandidateUsageError(f"candidate {text!r}: a folder without pyproject.toml or setup.py "
                                      "is not a checkout")
        commit, date = git_commit_and_date(path)
        return Candidate(text, "checkout", _checkout_name(path), ("-e", str(path.resolve())), None,
                         commit, date)
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        why = str(exc).splitlines()[0]
        raise CandidateUsageError(f"candidate {text!r} is not a requirement, a wheel file or a checkout "
                                  f"({why})") from None
    name = canonicalize_name(req.name)
    if req.url:
        ref = req.url.rsplit("@", 1)[-1] if req.url.startswith("git+") and req.url.count("@") >= 1 else ""
        commit = ref if HEX.match(ref) else None
        date = None
        if commit and git_repo is not None:
            full, date = git_commit_and_date(git_repo, commit)
            commit = full or commit
        if req.url.startswith("git+") and commit is None:
            raise CandidateUsageError(f"candidate {text!r}: a git reference must name a commit "
                                      "(name @ git+URL@<sha>), so the stack is exact")
        return Candidate(text, "direct", name, (text,), None, commit, date)
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise CandidateUsageError(f"candidate {text!r} must be exact (name==version, a wheel file, "
                                  "name @ git+URL@commit or a checkout folder): a range is not a stack")
    return Candidate(text, "index", name, (text,), specs[0].version)


def from_set_file(path: Path, *, git_repo: Path | None = None) -> list[Candidate]:
    """The candidates of a set file: a Neuron release's ``packages`` (name -> version), or a
    ``candidates`` list of any form ``parse`` takes (relative paths from the file's folder)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise CandidateUsageError(f"candidate set {path}: {exc}") from None
    if isinstance(data.get("packages"), dict):
        return [parse(f"{name}=={version}") for name, version in data["packages"].items()]
    if isinstance(data.get("candidates"), list):
        return [parse(str(c), git_repo=git_repo, base=Path(path).parent) for c in data["candidates"]]
    raise CandidateUsageError(f"candidate set {path}: expected a 'packages' object (name -> version) "
                              "or a 'candidates' list")
