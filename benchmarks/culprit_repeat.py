"""Repeat the launcher's failure programs and count how often the culprit is named right.

    .venv/bin/python benchmarks/culprit_repeat.py [REPEATS]   # default 20

Each repeat launches the real torchrun agent with two ranks of
``meta_tests/rank_programs/crash.py``: rank 1 raises at step 3 ("raise") or is SIGKILLed at
step 3 ("kill"); rank 0 then fails in its next barrier. Prints, per program, how often the
launcher named rank 1 (``fixtures.launch.culprit``), how often torchrun's own "first observed
failure" did, and every wrong answer with its explanation. Figures only, no assertion
(the meta tests in ``meta_tests/test_culprit.py`` hold the decision to every order of events).
"""

from __future__ import annotations

import collections
import sys
import tempfile
from pathlib import Path

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
sys.path.insert(0, str(REPO))

from fixtures.launch import launcher  # noqa: E402
from fixtures.launch.culprit import RootCause  # noqa: E402
from fixtures.runs.plan import torchrun_argv  # noqa: E402

PROGRAM = REPO / "meta_tests" / "rank_programs" / "crash.py"


def main(repeats: int) -> None:
    for how in ("raise", "kill"):
        ours = collections.Counter()
        torchruns = collections.Counter()
        consequences = collections.Counter()
        wrong = []
        for i in range(repeats):
            with tempfile.TemporaryDirectory(prefix=f"culprit-{how}-") as tmp:
                tmp = Path(tmp)
                argv = torchrun_argv(2, [str(PROGRAM), how], tmp / "logs")
                outcome = launcher.launch([argv], tmp, {}, 60.0, nproc_per_node=2)
                rc = outcome.root_cause or RootCause(rank=None)
                ours[rc.rank] += 1
                torchruns[rc.torchrun_first_observed] += 1
                consequences[tuple(c["rank"] for c in outcome.consequences)] += 1
                if rc.rank != 1 or outcome.leftover_pids:
                    wrong.append((i, launcher.describe_failure(outcome, lines=5)))
        print(f"{how}: {repeats} launches; culprit named by the launcher: {dict(ours)}; "
              f"torchrun's first observed failure: {dict(torchruns)}; "
              f"ranks listed as consequences: {dict(consequences)}")
        for i, text in wrong:
            print(f"  WRONG (repeat {i}):\n    " + text.replace("\n", "\n    "))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
