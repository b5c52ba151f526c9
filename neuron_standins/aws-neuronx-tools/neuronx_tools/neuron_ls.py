"""REHEARSAL STAND-IN of ``neuron-ls`` (aws-neuronx-tools) on a trn2.3xlarge, never trn2 evidence.

Prints what ``neuron-ls`` prints on a trn2.3xlarge: one Trainium2 device (8 physical
NeuronCores, 96 GB), whose logical cores follow ``NEURON_LOGICAL_NC_CONFIG`` (unset: 2, the
Trainium2 default): LNC=2 -> 4 cores (ids 0-3), LNC=1 -> 8 cores (ids 0-7).

Sources: the formats are those of aws-neuron/aws-neuron-sdk ``tools/neuron-sys-tools/neuron-ls.rst``
(mirror commit 81ce03ae, examples on a trn2n.48xlarge): three header lines
(``instance-type:``, ``instance-id:``, ``logical-neuroncore-config:``), then the device table;
``--show-all-procs``/``-a`` drops the CORE IDS, CPU AFFINITY and NUMA columns, shortens the
BDF and lists one row per process using the device (PID, COMMAND, RUNTIME VERSION);
``--json-output``/``-j`` is an array of devices with ``neuron_device``, ``bdf``, ``nc_count``,
``logical_neuroncore_config``, ``memory_size``, ``neuroncore_ids`` and ``neuron_processes``
(``pid``, ``command``, ``neuron_runtime_version``). A single-device instance has no CONNECTED
DEVICES column; the trn2.3xlarge row is the real output quoted verbatim in several public
repositories (e.g. qingzwang/neuronx-distributed-inference
``contrib/models/flux.1-lite-8B/HANDSON.md``): ``| 0 | 4 | 0-3 | 96 GB | 0000:33:00.0 | 0-11 | 0 |``.
At LNC=1 the same device shows 8 cores, ids 0-7 (aws-neuron-sdk ``logical-neuroncore-config.rst``:
"With LNC=1, all 8 physical cores are treated as individual logical NeuronCores"). The instance
id is a placeholder (all zeros). The processes are those holding the device's cores in the
stand-in runtime (``neuronx_tools.cores``), with runtime version ``rehearsal``. ``-w`` and
``-t`` are refused (exit 2). A ``NEURON_LOGICAL_NC_CONFIG`` other than 1 or 2 is refused
(our wording, exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from neuronx_tools import cores as core_locks

INSTANCE_TYPE = "trn2.3xlarge"
INSTANCE_ID = "i-00000000000000000"  # placeholder: this host is a rehearsal, not an EC2 instance
MEMORY_BYTES = 103079215104  # 96 GiB, neuron-ls.rst's memory_size
RUNTIME_VERSION = "rehearsal"

PLAIN = ("+--------+--------+----------+--------+--------------+----------+------+",
         "| NEURON | NEURON |  NEURON  | NEURON |     PCI      |   CPU    | NUMA |",
         "| DEVICE | CORES  | CORE IDS | MEMORY |     BDF      | AFFINITY | NODE |")
PLAIN_WIDTHS = (8, 8, 10, 8, 14, 10, 6)
PROCS = ("+--------+--------+--------+---------+--------+------------------------------------------+---------+",
         "| NEURON | NEURON | NEURON |   PCI   |  PID   |                 COMMAND                  | RUNTIME |",
         "| DEVICE | CORES  | MEMORY |   BDF   |        |                                          | VERSION |")
PROCS_WIDTHS = (8, 8, 8, 9, 8, 42, 9)


def row(cells, widths) -> str:
    return "|" + "|".join(" " + str(c)[: w - 2].ljust(w - 1) for c, w in zip(cells, widths)) + "|"


def processes(device_cores: list[int]) -> list[dict]:
    """The processes holding any of ``device_cores``, in pid order."""
    holders = core_locks.core_holders()
    pids = sorted({pid for core, pid in holders.items() if core in device_cores and pid is not None})
    return [{"pid": pid, "command": core_locks.command_of(pid), "neuron_runtime_version": RUNTIME_VERSION}
            for pid in pids]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="neuron-ls", description=__doc__.splitlines()[0])
    parser.add_argument("-w", "--wide", action="store_true")
    parser.add_argument("-a", "--show-all-procs", action="store_true")
    parser.add_argument("-t", "--topology", action="store_true")
    parser.add_argument("-j", "--json-output", action="store_true")
    args = parser.parse_args(argv)
    if args.wide or args.topology:
        print("neuron-ls (rehearsal stand-in): --wide and --topology are not reproduced", file=sys.stderr)
        return 2
    raw = os.environ.get("NEURON_LOGICAL_NC_CONFIG", "").strip()
    if raw not in ("", "1", "2"):
        print(f"neuron-ls (rehearsal stand-in): NEURON_LOGICAL_NC_CONFIG={raw!r} is not 1 or 2",
              file=sys.stderr)
        return 1
    lnc = core_locks.runtime_lnc()
    count = core_locks.num_cores()
    ids = list(range(count))
    if args.json_output:
        print(json.dumps([{"neuron_device": 0, "bdf": "33:00.0", "cpu_affinity": "0-11", "numa_node": "0",
                           "nc_count": count, "logical_neuroncore_config": lnc, "memory_size": MEMORY_BYTES,
                           "neuroncore_ids": ids, "neuron_processes": processes(ids)}], indent=4))
        return 0
    print(f"instance-type: {INSTANCE_TYPE}")
    print(f"instance-id: {INSTANCE_ID}")
    print(f"logical-neuroncore-config: {lnc}")
    if args.show_all_procs:
        print("\n".join(PROCS))
        print(PROCS[0])
        procs = processes(ids) or [{"pid": "", "command": "", "neuron_runtime_version": ""}]
        for i, proc in enumerate(procs):
            device = ("0", str(count), "96 GB", "33:00.0") if i == 0 else ("", "", "", "")
            print(row((*device, proc["pid"], proc["command"], proc["neuron_runtime_version"]), PROCS_WIDTHS))
        print(PROCS[0])
        return 0
    print("\n".join(PLAIN))
    print(PLAIN[0])
    print(row(("0", str(count), f"0-{count - 1}", "96 GB", "0000:33:00.0", "0-11", "0"), PLAIN_WIDTHS))
    print(PLAIN[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
