"""REHEARSAL STAND-IN of a neighbour: another container's process holding other NeuronCores of
the devices a rehearsed pod was given. Never trn2 evidence.

Containers on one host "can share the devices but the cores cannot be shared"
(aws-neuron-sdk deploy/tutorials/build-run-container.rst); in Kubernetes the Neuron scheduler
extension hands out single cores (``aws.amazon.com/neuroncore``), so a pod given cores 16,17
of device 4 may share that device with another pod holding 18,19. This process reserves the
host file's ``neighbour.cores`` as the stand-in runtime reserves a process's cores (``flock`` on
``core<N>.lock`` in the lock folder, its pid written there: ``neuronx_tools.cores``), prints
``holding <cores>`` and keeps them until it is terminated or the process that started it (the
rehearsal session) exits. neuron-ls then lists it on the device, as it lists any runtime
process. Cores already held (a second session of the same host, an xdist worker) are said and
left alone (exit 0).
"""

from __future__ import annotations

import fcntl
import os
import sys
import time

from neuronx_tools import cores as core_locks


def main() -> int:
    wanted = [int(c) for c in (core_locks.host().get("neighbour") or {}).get("cores", [])]
    if not wanted:
        print("no neighbour on this host", flush=True)
        return 0
    folder = core_locks.lock_dir()
    os.makedirs(folder, exist_ok=True)
    held = []
    for core in wanted:
        fd = os.open(os.path.join(folder, f"core{core}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"core {core} is already held: no neighbour started", flush=True)
            return 0
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        held.append(fd)
    parent = os.getppid()
    print(f"holding {','.join(map(str, wanted))}", flush=True)
    while os.getppid() == parent:  # the session that started it still runs
        time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
