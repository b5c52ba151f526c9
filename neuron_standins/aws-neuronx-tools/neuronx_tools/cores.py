"""Which process holds which logical NeuronCore (REHEARSAL STAND-IN, never trn2 evidence).

The stand-in runtime (``torch_neuronx._C``) reserves a process's visible cores with
``flock(LOCK_EX)`` on ``$NEURON_REHEARSAL_LOCK_DIR/core<N>.lock`` (default
``/tmp/neuron-rehearsal-cores``) and writes its pid there, held until the process exits, as
the Neuron runtime reserves the cores it initialises ("Once a NeuronCore is reserved for a
process, it cannot be used by another process at all, until the process reserving that
NeuronCore is terminated": aws-neuron-sdk neuron-runtime/guides/configuration-guide.rst).
Held locks are read from ``/proc/locks`` (no probing, so a listing never races a process that
is reserving), matched to the lock files by device and inode. Torch-free.
"""

from __future__ import annotations

import json
import os

PHYSICAL_CORES = 8  # per Trainium2 device
DEFAULT_LOCK_DIR = "/tmp/neuron-rehearsal-cores"
HOST_ENV = "NEURON_REHEARSAL_HOST"  # a host file of neuron_standins/hosts/ (default: a trn2.3xlarge)
DEFAULT_HOST = {"name": "trn2.3xlarge", "instance_type": "trn2.3xlarge", "instance_devices": 1, "devices": [0],
                "lnc": None, "layout": "2.25", "pid_offset": 0, "bdf": ["33"]}


def host() -> dict:
    path = os.environ.get(HOST_ENV)
    if not path:
        return DEFAULT_HOST
    with open(path) as f:
        return {**DEFAULT_HOST, **json.load(f)}


def host_lnc(h: dict) -> int:
    """The LNC the host is configured with: the host file's, else the runtime's variable."""
    return int(h["lnc"]) if h.get("lnc") else runtime_lnc()


def lock_dir() -> str:
    return os.environ.get("NEURON_REHEARSAL_LOCK_DIR") or DEFAULT_LOCK_DIR


def runtime_lnc() -> int:
    return 1 if os.environ.get("NEURON_LOGICAL_NC_CONFIG", "").strip() == "1" else 2


def num_cores() -> int:
    """The instance's logical cores (as the stand-in runtime counts them)."""
    h = host()
    return int(os.environ.get("NEURON_REHEARSAL_NUM_CORES") or h["instance_devices"] * PHYSICAL_CORES // host_lnc(h))


def _held_flocks() -> dict[tuple[int, int, int], int]:
    """(major, minor, inode) -> pid of every granted flock on the host."""
    held = {}
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 6 or fields[1] != "FLOCK":
                continue
            major, minor, ino = fields[5].split(":")
            held[(int(major, 16), int(minor, 16), int(ino))] = int(fields[4])
    return held


def core_holders() -> dict[int, int | None]:
    """Logical core -> pid of the process holding it, or None when free."""
    held = _held_flocks()
    out: dict[int, int | None] = {}
    for core in range(num_cores()):
        try:
            st = os.stat(os.path.join(lock_dir(), f"core{core}.lock"))
        except FileNotFoundError:
            out[core] = None
            continue
        out[core] = held.get((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    return out


def command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
