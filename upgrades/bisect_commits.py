"""The first commit of a range that flips the contracts whose outcome changed over it.

    python -m upgrades --bisect-commits torchtitan GOOD..BAD --git-repo PATH
                              [--stack titan-5059f32] [-- PYTEST SELECTION]

1. Both ends are built and run on the selection (default: the cpu tier); the contracts whose
   outcome differs between them are the ones to explain.
2. Midpoints of the first-parent history GOOD..BAD are built once each, as the shared wheels
   were (``git archive`` of the package's files, ``pip wheel --no-deps --no-build-isolation``,
   the local label ``+git<sha>`` added to its version), installed over the trusted venv with
   ``--no-deps``, and run on those contracts only.
3. A commit that does not build, or whose package does not import, is skipped the way ``git
   bisect skip`` does: the next untested commit nearest the middle is tried, and the page says
   which were skipped and why. Where only skipped commits remain, the first bad commit is one of
   them or the next tested one, and the page says that.
4. Contracts that the first bad commit does not flip are bisected on, in the rest of the range.

The page (``bisect.md``/``bisect.json``) names each first bad commit with its date and subject,
the contracts it flips, how many builds it took and their wall time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from upgrades import candidate_env
from upgrades.candidates import Candidate
from upgrades.console import say as tell
from upgrades.sessions import run_suite, trusted_stack_id
from upgrades.stacks import REPO, STACKS

# The files of a torchtitan tree a wheel is built from (as ../shared/wheels/README.md says).
PACKAGE_FILES = {"torchtitan": ("torchtitan", "torchtitan_recipes", "assets", "pyproject.toml", "README.md", "LICENSE"),
                 "nki-library": ("src", "pyproject.toml", "README.md", "LICENSE", "NOTICE")}
IMPORT_CHECK = {"torchtitan": "import torchtitan.train", "nki-library": "import nkilib_src"}


def repository_name(repo: Path) -> str:
    """How the page names the repository: its origin's URL, else its folder's name (never an
    absolute path of this machine)."""
    proc = subprocess.run(["git", "-C", str(repo), "config", "--get", "remote.origin.url"],
                          capture_output=True, text=True)
    return proc.stdout.strip() or Path(repo).resolve().name


class RangeError(ValueError):
    """A range or repository the bisection cannot use (one line, exit 2)."""


@dataclass(frozen=True)
class Commit:
    sha: str
    date: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:9]


@dataclass(frozen=True)
class Tried:
    """One commit built and run (or why not): its contracts' outcomes and its wall time."""

    commit: Commit
    status: str  # "tested", "build failed", "import failed"
    detail: str = ""
    outcomes: Mapping[str, str] = field(default_factory=dict)
    wall_s: float = 0.0

    def to_json(self, contracts: list[str]) -> Mapping[str, Any]:
        """As bisect.json keeps it: the outcomes of ``contracts`` only."""
        return {**asdict(self), "outcomes": {n: o for n, o in self.outcomes.items() if n in contracts}}


@dataclass(frozen=True)
class Flip:
    """The first commit that flips ``contracts`` away from the good end's outcomes, and the
    skipped commits before it that could be it."""

    commit: Commit
    contracts: tuple[str, ...]
    outcomes: Mapping[str, str | None]
    could_be_any_of_skipped: tuple[str, ...] = ()

    def to_json(self) -> Mapping[str, Any]:
        return {"commit": asdict(self.commit), "contracts": list(self.contracts), "outcomes": dict(self.outcomes),
                "could_be_any_of_skipped": list(self.could_be_any_of_skipped)}


@dataclass(frozen=True)
class BisectedRange:
    """The whole bisection of a range (``bisect.json``): what changed between its ends, each
    first bad commit, and every build tried."""

    package: str
    range: str
    repository: str
    stack: str
    selection: tuple[str, ...]
    commits: int
    changed: tuple[str, ...]
    good_outcomes: Mapping[str, str | None]
    flips: tuple[Flip, ...]
    tried: tuple[Tried, ...]
    wall_s: float

    @property
    def builds(self) -> int:
        return len(self.tried)

    @property
    def skipped(self) -> int:
        return sum(1 for t in self.tried if t.status != "tested")

    def to_json(self) -> Mapping[str, Any]:
        return {"package": self.package, "range": self.range, "repository": self.repository, "stack": self.stack,
                "selection": list(self.selection), "commits": self.commits, "changed": list(self.changed),
                "good_outcomes": dict(self.good_outcomes), "bisect": {"flips": [f.to_json() for f in self.flips]},
                "builds": self.builds, "skipped": self.skipped, "wall_s": self.wall_s,
                "tried": [t.to_json(list(self.changed)) for t in self.tried]}


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RangeError(f"git {' '.join(args)} in {repo}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'failed'}")
    return proc.stdout


def commits_between(repo: Path, good: str, bad: str) -> list[Commit]:
    """GOOD (first) .. BAD (last), oldest first, along the first-parent line of BAD."""
    lines = git(repo, "log", "--first-parent", "--reverse", "--format=%H%x09%cI%x09%s", f"{good}..{bad}")
    found = [Commit(*line.split("\t", 2)) for line in lines.splitlines() if line.strip()]
    head = git(repo, "show", "-s", "--format=%H%x09%cI%x09%s", good).strip().split("\t", 2)
    if not found:
        raise RangeError(f"{good}..{bad} holds no commit in {repo}")
    return [Commit(*head)] + found


def parse_range(text: str) -> tuple[str, str]:
    if text.count("..") != 1 or text.startswith("..") or text.endswith(".."):
        raise RangeError(f"{text!r} is not a range GOOD..BAD")
    good, bad = text.split("..")
    return good, bad


def build_wheel(repo: Path, package: str, commit: Commit, work: Path, python: Path) -> Path:
    """The package's wheel at ``commit`` (its files only, version label ``+git<sha>``)."""
    src = work / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    names = [n for n in PACKAGE_FILES[package]
             if subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit.sha}:{n}"],
                               capture_output=True).returncode == 0]
    archive = work / "src.tar"
    with open(archive, "wb") as f:
        proc = subprocess.run(["git", "-C", str(repo), "archive", commit.sha, *names], stdout=f,
                              stderr=subprocess.PIPE, text=False)
    if proc.returncode != 0:
        raise BuildFailed(proc.stderr.decode(errors="replace")[-500:])
    with tarfile.open(archive) as tar:
        tar.extractall(src, filter="data")
    version_file = src / "assets" / "version.txt"
    if version_file.exists():
        version_file.write_text(version_file.read_text().strip().split("+")[0] + f"+git{commit.sha[:7]}\n")
    out = work / "wheel"
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.run([str(python), "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "-w", str(out), str(src)], capture_output=True, text=True)
    wheels = list(out.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        raise BuildFailed((proc.stderr or proc.stdout)[-800:])
    return wheels[0]


class BuildFailed(RuntimeError):
    pass


def differs(outcomes: Mapping[str, str], reference: Mapping[str, str], contracts: list[str]) -> list[str]:
    return [n for n in contracts if outcomes.get(n) != reference.get(n)]


def _pick(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The untested index strictly between lo and hi nearest the middle (git bisect skip)."""
    middle = (lo + hi) / 2
    options = [i for i in range(lo + 1, hi) if i not in skipped]
    return min(options, key=lambda i: (abs(i - middle), i)) if options else None


def bisect(commits: list[Commit], test, contracts: list[str], good: Mapping[str, str], say=print) -> tuple[Flip, ...]:
    """The first commits flipping ``contracts`` away from ``good``'s outcomes. ``test(i)`` ->
    Tried for commit ``i`` (cached by the caller)."""
    flips, remaining, lo = [], list(contracts), 0
    hi_end = len(commits) - 1
    while remaining:
        lo_i, hi_i, skipped = lo, hi_end, set()
        while True:
            i = _pick(lo_i, hi_i, skipped)
            if i is None:
                break
            tried = test(i)
            if tried.status != "tested":
                skipped.add(i)
                say(f"bisect: {commits[i].short} skipped ({tried.status})")
                continue
            if differs(tried.outcomes, good, remaining):
                hi_i = i
            else:
                lo_i = i
        at = test(hi_i)
        flipped = differs(at.outcomes, good, remaining)
        between = [commits[j].short for j in sorted(skipped) if lo_i < j < hi_i]
        flips.append(Flip(commits[hi_i], tuple(flipped), {n: at.outcomes.get(n) for n in flipped}, tuple(between)))
        remaining = [n for n in remaining if n not in flipped]
        if not flipped:  # the far end itself does not differ: nothing more to find
            break
        lo = hi_i
    return tuple(flips)


def render(result: BisectedRange) -> str:
    lines = [f"# Bisect: {result.package} {result.range}", "",
             f"Repository: `{result.repository}`; {result.commits} commits on the first-parent line; "
             f"stack `{result.stack}`; selection `pytest {' '.join(result.selection)}`.", "",
             f"**Cost: {result.builds} builds ({result.skipped} skipped), {result.wall_s / 60:.1f} min.**", ""]
    if not result.changed:
        lines.append("No contract of the selection changed outcome between the two ends: nothing to bisect.")
    for flip in result.flips:
        c = flip.commit
        lines += [f"## First bad commit: `{c.short}` ({c.date[:10]}) {c.subject}", ""]
        if flip.could_be_any_of_skipped:
            lines.append(f"It or one of the skipped commits before it: {', '.join(flip.could_be_any_of_skipped)}.")
        lines += [f"- `{n}`: {result.good_outcomes.get(n)} -> {o}" for n, o in flip.outcomes.items()]
        lines.append("")
    lines += ["## Builds", "", "| commit | date | subject | result |", "|---|---|---|---|"]
    for t in result.tried:
        c = t.commit
        what = t.status if t.status != "tested" else ", ".join(
            f"{n.split('::')[-1]} {o}" for n, o in sorted(t.outcomes.items()) if n in result.changed) or "tested"
        lines.append(f"| `{c.short}` | {c.date[:10]} | {c.subject[:70]} | {what} |")
    return "\n".join(lines) + "\n"


def bisect_range(stack, package: str, repo: Path, range_text: str, selection: list[str], out: Path,
                 run_suite, inherit: list[str], say=print, options=None) -> BisectedRange:
    """The whole bisection (see the module docstring); ``run_suite(env, report_dir, args)`` runs
    pytest in a candidate environment and returns its report. ``options``: how each build is
    installed (default ``--no-deps``; with dependencies where the range changes them)."""
    if package not in PACKAGE_FILES:
        raise RangeError(f"--bisect-commits takes {' or '.join(PACKAGE_FILES)}, not {package!r}")
    if not (Path(repo) / ".git").exists() and not (Path(repo) / "HEAD").exists():
        raise RangeError(f"--git-repo {repo} is not a git repository")
    good, bad = parse_range(range_text)
    commits = commits_between(repo, good, bad)
    started = time.monotonic()
    tried = {}  # commit index -> Tried
    python = stack.venv / "bin" / "python"
    options = options or candidate_env.InstallOptions(no_deps=True)

    def test(i: int, contracts: list[str] | None = None) -> Tried:
        if i in tried:
            return tried[i]
        commit = commits[i]
        t0 = time.monotonic()
        say(f"bisect: building {package} at {commit.short} ({commit.date[:10]}) {commit.subject[:60]}")
        work = out / "builds" / commit.short
        try:
            wheel = build_wheel(repo, package, commit, work, python)
            cand = Candidate(str(wheel), "wheel", package, (str(wheel),), None, commit.sha, commit.date)
            env = candidate_env.build(stack, [cand], say=say, options=options, check=False)
        except (BuildFailed, candidate_env.CandidateError) as exc:
            tried[i] = Tried(commit, "build failed", str(exc)[-400:], wall_s=time.monotonic() - t0)
            return tried[i]
        proc = subprocess.run([str(env.python), "-c", IMPORT_CHECK[package]], capture_output=True, text=True)
        if proc.returncode != 0:
            tried[i] = Tried(commit, "import failed", proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "",
                             wall_s=time.monotonic() - t0)
            return tried[i]
        report = run_suite(env, out / "reports" / commit.short, (contracts or asked) + inherit)
        tried[i] = Tried(commit, "tested", outcomes=dict(report.outcomes),
                         wall_s=time.monotonic() - t0)
        return tried[i]

    asked = list(selection)
    ends = [test(0), test(len(commits) - 1)]
    for end in ends:
        if end.status != "tested":
            raise RangeError(f"the range's end {end.commit.short} cannot be tested ({end.status}: {end.detail})")
    changed = sorted(n for n in set(ends[0].outcomes) | set(ends[1].outcomes)
                     if ends[0].outcomes.get(n) != ends[1].outcomes.get(n))
    asked = changed  # the later builds run only the contracts to explain
    flips = bisect(commits, test, changed, ends[0].outcomes, say=say) if changed else ()
    result = BisectedRange(package=package, range=range_text, repository=repository_name(repo), stack=stack.name,
                           selection=tuple(selection), commits=len(commits), changed=tuple(changed),
                           good_outcomes={n: ends[0].outcomes.get(n) for n in changed}, flips=flips,
                           tried=tuple(t for _, t in sorted(tried.items())), wall_s=time.monotonic() - started)
    (out / "bisect.json").write_text(json.dumps(result.to_json(), indent=1) + "\n")
    (out / "bisect.md").write_text(render(result))
    return result


def bisect_command(request) -> int:
    """``python -m upgrades --bisect-commits PACKAGE GOOD..BAD`` (``upgrades.cli.Request``): the
    bisection, its page, and the first bad commits on the terminal."""
    args = request.args
    package, range_text = args.bisect_commits
    stack = STACKS[args.stack]
    if args.git_repo is None:
        tell("upgrade: --bisect-commits needs --git-repo (a clone holding the range)")
        return 2
    out = (args.out or REPO / "reports" / "out" / "bisect" / f"{package}-{range_text.replace('..', '-')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        options = (candidate_env.InstallOptions(no_deps=False, index_options=request.options.index_options)
                   if args.bisect_with_deps else None)
        result = bisect_range(stack, package, args.git_repo.resolve(), range_text, request.selection, out, run_suite,
                              ["--inherit-expectations", trusted_stack_id(stack)], say=tell, options=options)
    except RangeError as exc:
        tell(f"upgrade: {exc}")
        return 2
    for flip in result.flips:
        c = flip.commit
        tell(f"upgrade: first bad commit {c.short} ({c.date[:10]}) {c.subject}: {len(flip.contracts)} contract(s)")
    tell(f"upgrade: {result.builds} builds ({result.skipped} skipped) in {result.wall_s / 60:.1f} min; "
         f"wrote {out / 'bisect.md'}")
    return 0
