"""The upgrade check's command line: ``python -m upgrades --help`` (the check itself:
``upgrades.check``).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from fixtures.tiers.tier_name import Tier
from upgrades import candidate_env, candidates, perf_history
from upgrades.candidates import Candidate
from upgrades.console import say
from upgrades.stacks import DEFAULT_STACK, STACKS, Stack

DEFAULT_SELECTION = ["conformance", "-m", "cpu"]
TRN2_SELECTION = ["conformance", "-m", "trn2"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2: bad input is a usage error, not a verdict
        say(f"upgrade: {message} (python -m upgrades --help)")
        raise SystemExit(2)


def parse_args(argv: list[str], description: str | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The options and the pytest selection (what follows ``--``; default the cpu tier)."""
    selection = DEFAULT_SELECTION
    if "--" in argv:
        selection = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    parser = _Parser(prog="python -m upgrades", description=description,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidate", action="append", default=[], metavar="CANDIDATE",
                        help="name==version, a wheel file, 'name @ git+URL@commit', or a checkout folder")
    parser.add_argument("--candidate-set", type=Path, default=None, metavar="FILE",
                        help="a JSON file of candidates: a Neuron release's 'packages' or a 'candidates' list")
    parser.add_argument("--no-deps", action="store_true", help="install only what is named (a Neuron venv)")
    parser.add_argument("--extra-index-url", action="append", default=[], metavar="URL")
    parser.add_argument("--index-url", default=None, metavar="URL")
    parser.add_argument("--find-links", action="append", default=[], metavar="DIR_OR_URL")
    parser.add_argument("--git-repo", type=Path, default=None,
                        help="a clone of the candidate's repository, for commit dates (and --bisect-commits)")
    parser.add_argument("--bisect-commits", nargs=2, default=None, metavar=("PACKAGE", "GOOD..BAD"),
                        help="the first commit of GOOD..BAD (of --git-repo) that flips the contracts whose "
                             "outcome changed over the range (upgrades.bisect_commits)")
    parser.add_argument("--bisect-with-deps", action="store_true",
                        help="--bisect-commits: install each build with the requirements it adds (from the index), "
                             "for a range across which the package's requirements change (default: --no-deps)")
    parser.add_argument("--stack", default=DEFAULT_STACK, choices=sorted(STACKS))
    parser.add_argument("--tier", default=Tier.CPU, type=Tier, choices=tuple(Tier),
                        help="trn2: the candidate is a copy of the active Neuron environment ($VIRTUAL_ENV, or "
                             "--trusted-venv) with the candidates installed over it; the trusted session is run "
                             "there on the same selection unless --baseline-report names one")
    parser.add_argument("--trusted-venv", type=Path, default=None)
    parser.add_argument("--baseline-report", type=Path, default=None, metavar="REPORT_DIR",
                        help="the trusted session's report folder to compare with, instead of running it")
    parser.add_argument("--bisect", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--trusted-today", action="store_true",
                        help="cpu: also run the trusted stack on the selection with today's checkout, and mark "
                             "every moved figure with its value there (the committed baseline may be older than "
                             "the checkout: a move the trusted stack shows today is not the candidate's); "
                             "without it, the figures of the trusted stack's cross-version session, which the "
                             "upgrade runs anyway, are used")
    parser.add_argument("--performance-launches", type=int, default=5, metavar="N",
                        help="performance sessions of each stack, in ABBA order (upgrades.perf_compare); "
                             "0: no performance check (the page says so)")
    parser.add_argument("--performance-max-launches", type=int, default=9, metavar="N",
                        help="an INCONCLUSIVE verdict adds one pair at a time to the same series, up to N a side")
    parser.add_argument("--history", type=Path, default=perf_history.HISTORY, metavar="DIR",
                        help="the stored performance history (upgrades.perf_history): the candidate is compared "
                             "with its oldest and latest stack on this machine, and the trusted sessions are stored")
    parser.add_argument("--accept-performance", action="store_true",
                        help="a SLOWER/LARGER/LEAKING performance verdict does not fail the upgrade; the page records it")
    parser.add_argument("--candidate-matrix", type=Path, default=None, metavar="FILE",
                        help="several candidate sets, one per line, each checked against the one trusted stack; "
                             "one page with a row per set (upgrades.matrix)")
    return parser.parse_args(argv), selection


@dataclass(frozen=True)
class Request:
    """One command as asked: its options, the pytest selection, and for an upgrade check the
    candidates, the trusted stack (on trn2: the active Neuron environment) and how pip
    installs the candidates."""

    args: argparse.Namespace
    argv: tuple[str, ...]
    selection: list[str]
    options: candidate_env.InstallOptions
    candidates: tuple[Candidate, ...] = ()
    stack: Stack | None = None


def parse(argv: list[str], description: str | None = None) -> Request | int:
    """The command ``argv`` asks for, or the exit status of a usage error (said on stderr) or
    of ``--help``."""
    try:
        args, selection = parse_args(argv, description)
    except SystemExit as exc:
        return int(exc.code or 0)
    options = install_options(args)
    if args.bisect_commits or args.candidate_matrix is not None:  # each row or commit names its own
        return Request(args, tuple(argv), selection, options)
    cands = _candidates(args)
    if cands is None:
        return 2
    stack, selection = _trusted_stack(args, selection)
    if stack is None:
        return 2
    return Request(args, tuple(argv), selection, options, tuple(cands), stack)


def _candidates(args) -> list[Candidate] | None:
    """The candidates asked for, or None after saying why not (a usage error)."""
    try:
        cands = [candidates.parse(text, git_repo=args.git_repo) for text in args.candidate]
        if args.candidate_set is not None:
            cands += candidates.from_set_file(args.candidate_set, git_repo=args.git_repo)
    except candidates.CandidateUsageError as exc:
        say(f"upgrade: {exc}")
        return None
    if not cands:
        say("upgrade: no candidate given (--candidate or --candidate-set)")
        return None
    return cands


def _trusted_stack(args, selection: list[str]) -> tuple[Stack | None, list[str]]:
    """The trusted stack (on trn2: the active Neuron environment) and the selection to run."""
    if args.tier != Tier.TRN2:
        return STACKS[args.stack], selection
    venv = args.trusted_venv or (Path(os.environ["VIRTUAL_ENV"]) if os.environ.get("VIRTUAL_ENV") else None)
    if venv is None or not (venv / "bin" / "python").exists():
        say("upgrade: --tier trn2 copies the active Neuron environment: activate it or pass --trusted-venv")
        return None, selection
    stack = Stack(f"trn2-{venv.resolve().name}", venv.resolve(), None)
    return stack, (TRN2_SELECTION if selection == DEFAULT_SELECTION else selection)


def install_options(args) -> candidate_env.InstallOptions:
    index = [a for url in args.extra_index_url for a in ("--extra-index-url", url)]
    index += ["--index-url", args.index_url] if args.index_url else []
    index += [a for d in args.find_links for a in ("--find-links", d)]
    return candidate_env.InstallOptions(no_deps=args.no_deps, index_options=tuple(index))


