"""Demonstration: a rank still compiling its first step past torchtitan's 300 s does not abort a
run whose process-group timeouts follow the tier profile (``Timeouts.comm_timeouts_s``).

    .venv-rehearsal/bin/python benchmarks/comm_timeout.py [--delay-s 330] [--host eks-pod-two-cores]

Builds the rehearsal's trn2 launch of ``dense_native`` (2 steps) with the suite's own
``launch_plan`` on the host, and runs it twice at once, each with its own stand-in core locks:
with the profile's ``--comm.*`` flags ("fixed") and without them (torchtitan's defaults,
"default"). In both, rank 1 sleeps ``--delay-s`` before its first forward-backward (a module
wrapping the trn2 config, written to a temporary folder), standing for a rank whose peer is
still compiling. Prints each launch's exit code and time and the line that ended it; asserts
nothing. Needs the suite's assets in the run cache (any rehearsal session builds them).
CPU evidence only (the rehearsal's neuron process group wraps gloo): never trn2 evidence.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DELAY_MODULE = '''
import os, time
import torch.distributed as dist
from fixtures.rank.titan.trn2_qwen3.config_registry import dense_native as _dense_native
from torchtitan.trainer import Trainer

_original = Trainer.forward_backward_step

def _delayed(self, *args, **kwargs):
    if not getattr(_delayed, "done", False):
        _delayed.done = True
        if dist.get_rank() == 1:
            time.sleep(float(os.environ["DEMO_DELAY_S"]))
    return _original(self, *args, **kwargs)

Trainer.forward_backward_step = _delayed

def dense_native():
    return _dense_native()
'''


def launch(host_name: str, folder: Path, label: str, keep_flags: bool, delay_s: float) -> str:
    from fixtures.data.assets import ensure_assets
    from fixtures.runs.plan import COMM_TIMEOUT_FLAGS, launch_plan
    from fixtures.runs.spec import RunSpec
    from fixtures.tiers import neuron_host, rehearsal, tier_profile

    root = REPO / ".cache" / "conformance"
    assets = ensure_assets(root)
    host = rehearsal.load_host(host_name)
    rehearsal.activate(host)
    detection = neuron_host.detect_neuron(dev_dir=str(rehearsal.standin_dev_dir(root, host)))
    tier = tier_profile.require_trn2(detection, assets.hf_dir(tied=True), rehearsal=True,
                                     seq_len=rehearsal.REHEARSAL_SEQ_LEN,
                                     compile_cache=folder / "neuron-compile-cache")
    run = folder / label
    plan = launch_plan(RunSpec(config="dense_native", steps=2), tier, run, hf_assets=assets.hf_dir(tied=True),
                       dataset=assets.dataset_dir)
    argv = list(plan.node_argvs[0])
    argv[argv.index("--module") + 1] = "delay_titan"
    if not keep_flags:
        for flag in COMM_TIMEOUT_FLAGS:
            i = argv.index(flag)
            del argv[i:i + 2]
    env = {**os.environ, **plan.env, **plan.node_envs[0], "DEMO_DELAY_S": str(delay_s),
           "NEURON_REHEARSAL_LOCK_DIR": str(folder / f"locks-{label}")}
    env["PYTHONPATH"] = os.pathsep.join((str(folder), env["PYTHONPATH"]))
    start = time.monotonic()
    with open(folder / f"{label}.txt", "w") as console:
        rc = subprocess.call(argv, env=env, stdout=console, stderr=subprocess.STDOUT, timeout=delay_s + 900)
    lines = (folder / f"{label}.txt").read_text().splitlines()
    last = next((l for l in reversed(lines) if "Timed out" in l or "Training completed" in l), lines[-1] if lines else "")
    flags = "with the profile's --comm flags" if keep_flags else "with torchtitan's defaults"
    return f"{label} ({flags}): exit {rc} after {time.monotonic() - start:.0f} s: {last.strip()[:200]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-s", type=float, default=330.0)
    parser.add_argument("--host", default="eks-pod-two-cores")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="comm-timeout-"))
    (folder / "delay_titan").mkdir()
    (folder / "delay_titan" / "__init__.py").write_text("")
    (folder / "delay_titan" / "config_registry.py").write_text(DELAY_MODULE)
    with ThreadPoolExecutor(max_workers=2) as pool:
        for line in pool.map(lambda a: launch(args.host, folder, *a, args.delay_s),
                             [("fixed", True), ("default", False)]):
            print(line, flush=True)
    print(f"consoles: {folder}")


if __name__ == "__main__":
    main()
