"""REHEARSAL STAND-IN of ``neuron-ls`` (aws-neuronx-tools), never trn2 evidence.

Prints what ``neuron-ls`` prints on the host described by ``$NEURON_REHEARSAL_HOST`` (a JSON
file of ``neuron_standins/hosts/``: data, each with its sources), by default a
trn2.3xlarge: one Trainium2 device (8 physical NeuronCores, 96 GB) whose logical cores follow
``NEURON_LOGICAL_NC_CONFIG`` (unset: 2, the Trainium2 default).

Sources: aws-neuron/aws-neuron-sdk ``tools/neuron-sys-tools/neuron-ls.rst``.
- Layout "2.25" (commits 56af36ca, 539a73c5: Neuron 2.25 to 2.29, examples on a
  trn2n.48xlarge): three header lines (``instance-type:``, ``instance-id:``,
  ``logical-neuroncore-config:``), then the device table NEURON DEVICE | NEURON CORES | NEURON
  CORE IDS | NEURON MEMORY | CONNECTED DEVICES | PCI BDF | CPU AFFINITY | NUMA NODE;
  ``--show-all-procs``/``-a`` drops CORE IDS, CPU AFFINITY and NUMA, shortens the BDF and lists
  one row per process using the device (PID, COMMAND, RUNTIME VERSION), a rule between
  devices; ``--json-output``/``-j`` is an array of devices with ``neuron_device``, ``bdf``,
  ``connected_to``, ``nc_count``, ``logical_neuroncore_config``, ``memory_size``,
  ``neuroncore_ids`` and ``neuron_processes`` (``pid``, ``command``, ``neuron_runtime_version``).
- Layout "2.21" (b0d483b7): the same header lines and a table without NEURON CORE IDS, CPU
  AFFINITY and NUMA NODE, the BDF short (``cc:00.0``); no ``-j`` (the option appears in
  2ae3525e, Neuron 2.22): refused as argparse refuses an unknown option (exit 2).
- Layout "2.22" (2ae3525e: Neuron 2.22 to 2.24): the 2.21 table, and ``-j`` whose devices have
  ``neuron_device``, ``bdf``, ``connected_to``, ``nc_count``, ``logical_neuroncore_config``,
  ``memory_size`` and ``neuron_processes``: no ``neuroncore_ids``, ``cpu_affinity`` or
  ``numa_node`` (all three appear in 56af36ca).
A single-device instance has no CONNECTED DEVICES column (the trn2.3xlarge row quoted in
public repositories: ``| 0 | 4 | 0-3 | 96 GB | 0000:33:00.0 | 0-11 | 0 |``).

Host facts beyond the docs are the host file's, marked ASSUMED there (a container's listing
without instance metadata; its PIDs in the host's namespace, ``pid_offset``). In a container
(``neuron_ls_lists: "instance"``) neuron-ls lists every device of the instance, not only those
the container was given ("it identifies all Neuron devices present in the current instance":
neuron-ls.rst; ASSUMED that this holds inside a container, whose /dev has only its own nodes:
the side worse for a suite that matched the two). The instance id
is a placeholder (all zeros). The processes are those holding the host's cores in the
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

INSTANCE_ID = "i-00000000000000000"  # placeholder: this host is a rehearsal, not an EC2 instance
MEMORY_BYTES = 103079215104  # 96 GiB, neuron-ls.rst's memory_size
PHYSICAL_CORES = core_locks.PHYSICAL_CORES
RUNTIME_VERSION = "rehearsal"


def connected(h: dict, dev: int) -> list[int]:
    """The 4x4 torus of a 16-device instance, as neuron-ls.rst lists it (device 0: 12, 3, 4, 1)."""
    n = h["instance_devices"]
    row, col = divmod(dev, 4)
    return [(dev - 4) % n, row * 4 + (col - 1) % 4, (dev + 4) % n, row * 4 + (col + 1) % 4]


def affinity(h: dict, dev: int) -> tuple[str, str]:
    if h["instance_devices"] == 1:
        return "0-11", "0"
    return ("0-47,96-143", "0") if 4 <= dev <= 11 else ("48-95,144-191", "1")


def listed_devices(h: dict) -> list[int]:
    """The devices neuron-ls lists: the container's own, or every device of the instance."""
    return list(range(h["instance_devices"])) if h.get("neuron_ls_lists") == "instance" else h["devices"]


def device_rows(h: dict) -> list[dict]:
    per = PHYSICAL_CORES // core_locks.host_lnc(h)
    out = []
    for dev in listed_devices(h):
        ids = list(range(dev * per, dev * per + per))
        cpu, numa = affinity(h, dev)
        out.append({"dev": dev, "nc": per, "ids": ids, "bdf": f"{h['bdf'][dev % len(h['bdf'])]}:00.0",
                    "cpu": cpu, "numa": numa, "connected": connected(h, dev) if h["instance_devices"] > 1 else None})
    return out


def processes(h: dict, device_cores: list[int]) -> list[dict]:
    """The processes holding any of ``device_cores``, in pid order, numbered as the host's PID
    namespace numbers them (``pid_offset``: a container's pids seen from outside)."""
    holders = core_locks.core_holders()
    pids = sorted({pid for core, pid in holders.items() if core in device_cores and pid is not None})
    return [{"pid": pid + int(h.get("pid_offset") or 0), "command": core_locks.command_of(pid),
             "neuron_runtime_version": RUNTIME_VERSION} for pid in pids]


def table(columns: list[tuple[str, str]], rows: list[list[str]], rule_between: bool = False) -> list[str]:
    """neuron-ls's box table: two header lines per column, cells padded one space each side."""
    widths = [max(len(a), len(b), *(len(r[i]) for r in rows)) + 2 for i, (a, b) in enumerate(columns)]
    rule = "+" + "+".join("-" * w for w in widths) + "+"

    def line(cells, centre=False):
        return "|" + "|".join((f" {c} ".center(w) if centre else f" {c}".ljust(w)) for c, w in zip(cells, widths)) + "|"

    out = [rule, line([a for a, _ in columns], True), line([b for _, b in columns], True), rule]
    for i, r in enumerate(rows):
        if rule_between and i and r[0]:
            out.append(rule)
        out.append(line(r))
    return out + [rule]


def plain(h: dict) -> list[str]:
    multi = h["instance_devices"] > 1
    new = h["layout"] == "2.25"  # CORE IDS, the full BDF, CPU AFFINITY and NUMA NODE
    cols = [("NEURON", "DEVICE"), ("NEURON", "CORES")]
    if new:
        cols.append(("NEURON", "CORE IDS"))
    cols.append(("NEURON", "MEMORY"))
    if multi:
        cols.append(("CONNECTED", "DEVICES"))
    cols.append(("PCI", "BDF"))
    if new:
        cols += [("CPU", "AFFINITY"), ("NUMA", "NODE")]
    rows = []
    for d in device_rows(h):
        r = [str(d["dev"]), str(d["nc"])]
        if new:
            r.append(f"{d['ids'][0]}-{d['ids'][-1]}")
        r.append("96 GB")
        if multi:
            r.append(", ".join(map(str, d["connected"])))
        r.append(f"0000:{d['bdf']}" if new else d["bdf"])
        if new:
            r += [d["cpu"], d["numa"]]
        rows.append(r)
    return table(cols, rows)


def all_procs(h: dict) -> list[str]:
    multi = h["instance_devices"] > 1
    cols = [("NEURON", "DEVICE"), ("NEURON", "CORES"), ("NEURON", "MEMORY")]
    if multi:
        cols.append(("CONNECTED", "DEVICES"))
    cols += [("PCI", "BDF"), ("PID", ""), ("COMMAND", ""), ("RUNTIME", "VERSION")]
    rows = []
    for d in device_rows(h):
        procs = processes(h, d["ids"]) or [{"pid": "", "command": "", "neuron_runtime_version": ""}]
        for i, p in enumerate(procs):
            device = [str(d["dev"]), str(d["nc"]), "96 GB", *([", ".join(map(str, d["connected"]))] if multi else []),
                      d["bdf"]]
            rows.append([*(device if i == 0 else [""] * len(device)), str(p["pid"]), p["command"][:40],
                         p["neuron_runtime_version"]])
    return table(cols, rows, rule_between=True)


def as_json(h: dict) -> list[dict]:
    """``-j``: the 2.25 keys, or the 2.22 ones (no cpu_affinity, numa_node, neuroncore_ids)."""
    new = h["layout"] == "2.25"
    out = []
    for d in device_rows(h):
        entry = {"neuron_device": d["dev"], "bdf": d["bdf"]}
        if new:
            entry.update({"cpu_affinity": d["cpu"], "numa_node": d["numa"]})
        if d["connected"] is not None:
            entry["connected_to"] = d["connected"]
        entry.update({"nc_count": d["nc"], "logical_neuroncore_config": core_locks.host_lnc(h),
                      "memory_size": MEMORY_BYTES})
        if new:
            entry["neuroncore_ids"] = d["ids"]
        entry["neuron_processes"] = processes(h, d["ids"])
        out.append(entry)
    return out


def main(argv=None) -> int:
    h = core_locks.host()
    parser = argparse.ArgumentParser(prog="neuron-ls", description=__doc__.splitlines()[0])
    parser.add_argument("-w", "--wide", action="store_true")
    parser.add_argument("-a", "--show-all-procs", action="store_true")
    parser.add_argument("-t", "--topology", action="store_true")
    if h["layout"] != "2.21":
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
    if getattr(args, "json_output", False):
        print(json.dumps(as_json(h), indent=4))
        return 0
    if h.get("instance_type"):
        print(f"instance-type: {h['instance_type']}")
        print(f"instance-id: {INSTANCE_ID}")
    print(f"logical-neuroncore-config: {core_locks.host_lnc(h)}")
    print("\n".join(all_procs(h) if args.show_all_procs else plain(h)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
