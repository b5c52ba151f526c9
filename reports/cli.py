"""The command line of a ``python -m reports.X`` tool: its module docstring is its help."""

from __future__ import annotations

import argparse


def command_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of ``python -m module``, its description the module's docstring as written."""
    return argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
