"""Topology contracts: instance/LNC arithmetic, world size, FSDP sharding, the launch line.

Facts: CONTRACTS.md "Topology" and "Launch". trn2.48xlarge is 16 Trainium2 chips x 8
physical NeuronCores; LNC=2 (the Trainium2 default) gives 64 logical cores, LNC=1 gives 128;
trn2.3xlarge gives 4 / 8; trn1.32xlarge has 32 cores and LNC=1 only. One process runs per
logical core, and ``data_parallel_shard_degree=-1`` shards parameters over all ranks.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fixtures.oracles import core_binding
from fixtures.tiers import neuron_host, topology
from fixtures.tiers.core_pinning import CorePinning
from fixtures.rank import probes, run_files
from fixtures.runs.plan import RANK_WRAPPER, WRITEUP_FLAGS
from fixtures.contract import expect, expect_close_series, expect_equal, require_trained
from fixtures.runs.catalogue import DENSE_NATIVE, rank_scaling, two_nodes

pytestmark = pytest.mark.topology

# The write-up's table, as data: (instance, LNC) -> logical cores, or None where rejected;
# trn2n and trn2u are 16 Trainium2 devices like trn2.48xlarge (aws-neuron-sdk trn2-arch.rst;
# neuron-ls.rst's trn2n.48xlarge example lists 16 devices x 4 logical cores, ids 0-63).
LOGICAL_CORES = {
    ("trn2.48xlarge", 2): 64,
    ("trn2.48xlarge", 1): 128,
    ("trn2n.48xlarge", 2): 64,
    ("trn2n.48xlarge", 1): 128,
    ("trn2u.48xlarge", 2): 64,
    ("trn2u.48xlarge", 1): 128,
    ("trn2.3xlarge", 2): 4,
    ("trn2.3xlarge", 1): 8,
    ("trn1.32xlarge", 1): 32,
    ("trn1.32xlarge", 2): None,
}


@pytest.mark.parametrize(("instance", "lnc"), sorted(LOGICAL_CORES))
def test_logical_core_table(instance, lnc):
    """Each (instance, LNC) of the write-up maps to its logical core count, or is rejected."""
    expected = LOGICAL_CORES[(instance, lnc)]
    if expected is None:
        with pytest.raises(topology.TopologyError, match=f"LNC={lnc} is not supported"):
            topology.logical_cores(instance, lnc)
    else:
        expect_equal(f"{instance} at LNC={lnc} has {expected} logical NeuronCores", expected,
                     topology.logical_cores(instance, lnc))


@given(instance=st.sampled_from(sorted(topology.INSTANCE_TYPES)), lnc=st.sampled_from([1, 2]))
def test_lnc_groups_physical_cores(instance, lnc):
    """Logical cores x LNC = physical cores, for every supported combination; others raise."""
    it = topology.INSTANCE_TYPES[instance]
    if lnc not in it.supported_lnc:
        with pytest.raises(topology.TopologyError):
            topology.logical_cores(instance, lnc)
        return
    cores = topology.logical_cores(instance, lnc)
    expect_equal(f"{instance}: logical cores ({cores}) x LNC ({lnc}) = physical cores", it.physical_cores,
                 cores * lnc)
    if 1 in it.supported_lnc and 2 in it.supported_lnc:
        expect_equal(f"{instance}: LNC=1 exposes twice the cores of LNC=2", 2 * topology.logical_cores(instance, 2),
                     topology.logical_cores(instance, 1))


@given(value=st.one_of(st.none(), st.text(max_size=4), st.integers(-4, 8).map(str)))
def test_lnc_env_parsing(value):
    """NEURON_LOGICAL_NC_CONFIG: unset means the default, "1"/"2" are accepted, all else raises."""
    if value is None or value.strip() == "":
        expect_equal("unset LNC env means the default", 2, topology.parse_lnc(value, 2))
    elif value.strip() in ("1", "2"):
        expect_equal("LNC env value is used", int(value), topology.parse_lnc(value, 2))
    else:
        with pytest.raises(topology.TopologyError):
            topology.parse_lnc(value, 2)


def test_lnc_env_and_compiler_flag_must_agree():
    """The runtime env and ``--logical-nc-config`` must agree (CONTRACTS.md "Topology")."""
    topology.check_lnc_agreement(2, "--logical-nc-config 2 -O1")
    topology.check_lnc_agreement(1, "--logical-nc-config=1")
    with pytest.raises(topology.TopologyError, match="must agree"):
        topology.check_lnc_agreement(2, "--logical-nc-config=1")


def host_cores(tier) -> tuple[list[int], str]:
    """The logical cores the session's ranks must hold, and where that comes from: a whole
    instance's from the write-up's table (ids 0..N-1, as neuron-ls numbers them); a subset
    (a container or pod, NEURON_RT_VISIBLE_CORES) as neuron-ls listed it at detection."""
    whole = LOGICAL_CORES.get((tier.instance, tier.lnc))
    exposed = list(tier.detection.cores if tier.detection else [])
    if whole is not None and len(exposed) in (0, whole):
        return list(range(whole)), f"{tier.instance} at LNC={tier.lnc} (the write-up's table)"
    return exposed, f"the {len(exposed)} cores {tier.detection.host if tier.detection else 'the host'} exposes (neuron-ls)"


@pytest.mark.only_tiers("trn2", reason="logical NeuronCores exist only on a Neuron host")
@pytest.mark.slow
def test_one_rank_per_logical_core(tier, titan_runs):
    """One rank per logical core, read from inside the run: the world is the logical cores
    of the instance at the runtime's LNC (from the write-up's table, not from the profile),
    or, on a host that exposes a subset, the cores neuron-ls listed; every rank runs with that
    NEURON_LOGICAL_NC_CONFIG and its own NeuronCore, as the rank's own environment says."""
    cores_wanted, source = host_cores(tier)
    run = require_trained(titan_runs.get(DENSE_NATIVE))
    expect_equal(f"{source}: one rank per logical core", len(cores_wanted),
                 run.probe(probes.parallel, 0)["world_size"], run)
    envs = [run.probe(probes.parallel, r)["env"] for r in range(run.world_size)]
    expect_equal("every rank runs at the runtime's LNC", {str(tier.lnc)},
                 {e["NEURON_LOGICAL_NC_CONFIG"] for e in envs}, run)
    cores = [str(e["NEURON_RT_VISIBLE_CORES"]) for e in envs]
    expect_equal(f"each rank has its own NeuronCore of {source}", sorted(map(str, cores_wanted)),
                 sorted(cores), run, detail=f"per rank: {cores}")


@pytest.mark.only_tiers("trn2", reason="NeuronCores exist only on a Neuron host")
@pytest.mark.slow
def test_two_nodes_split_the_neuron_cores(tier, titan_runs):
    """Two torchrun agents on one host: each claims its own half of the NeuronCores (LOCAL_RANK
    restarts at 0 on each agent, so cores must be offset), no core claimed twice."""
    cores_wanted, source = host_cores(tier)
    run = require_trained(titan_runs.get(two_nodes(tier)))
    world = run.probe(probes.parallel, 0)["world_size"]
    cores = [str(run.probe(probes.parallel, r)["env"]["NEURON_RT_VISIBLE_CORES"]) for r in range(world)]
    expect_equal(f"the two agents' ranks hold distinct NeuronCores covering {source}", sorted(map(str, cores_wanted)),
                 sorted(cores), run,
                 detail=f"per rank: {cores}")


@pytest.mark.only_tiers("trn2", reason="NeuronCores and the Neuron tools exist only on a Neuron host")
@pytest.mark.slow
def test_each_rank_holds_its_neuroncore_in_the_runtimes_view(tier, titan_runs):
    """The binding as the Neuron tools see it, not as the suite set it: with every rank on
    its device, ``neuron-ls -j`` (taken inside the run) lists each rank's process as using a
    device, each device as many rank processes as there are ranks whose own core (the
    ``NEURON_RT_VISIBLE_CORES`` the rank ran with) is one of the device's logical cores as
    neuron-ls numbers them (its ``neuroncore_ids``, or where neuron-ls 2.22 to 2.24 lists none
    the ids its ``nc_count`` gives each device; all of them on a whole instance, fewer in a pod
    given some cores), and no other process using the runtime on those devices but the
    neighbours listed on shared devices before the launch (other containers' processes on the
    devices' other cores: containers share devices, not cores; build-run-container.rst)."""
    run = require_trained(titan_runs.get(DENSE_NATIVE))
    listing = run.probe(probes.neuron_ls)
    if listing.get("devices") is not None:
        held = neuron_host.neuron_processes(listing["devices"])
        device_cores = neuron_host.json_device_cores(listing["devices"])  # 2.22-2.24: no neuroncore_ids
        tool = "neuron-ls -j"
    else:  # a neuron-ls without -j (Neuron 2.21): its plain -a table
        expect(bool(listing.get("plain")), "neuron-ls -j or -a ran inside the run", "a device list", listing, run)
        held = neuron_host.table_processes(listing["plain"])
        device_cores = neuron_host.neuron_ls_devices(listing["plain"])
        tool = "neuron-ls -a"
    expect(bool(device_cores) and all(device_cores.values()), f"{tool} lists each device's logical core ids",
           "ids per device", device_cores, run)
    neighbours_file = Path(run.run_dir) / run_files.NEIGHBOURS  # other containers' processes, other cores
    neighbours = set(json.loads(neighbours_file.read_text())["pids"]) if neighbours_file.is_file() else set()
    held = {pid: dev for pid, dev in held.items() if pid not in neighbours}
    rank_cores = [int(run.probe(probes.parallel, r)["env"]["NEURON_RT_VISIBLE_CORES"]) for r in range(run.world_size)]
    per_device = {dev: sum(1 for core in rank_cores if core in ids) for dev, ids in device_cores.items()}
    ranks = {run.probe(probes.parallel, r)["pid"]: r for r in range(run.world_size)}
    if held and not set(held) & set(ranks):
        # A container with its own PID namespace: neuron-ls lists the host's pids, which no
        # rank can see; what stays comparable is how many runtime processes use each device
        # of the session's (fixtures.oracles.core_binding).
        counted = core_binding.counts(held, device_cores, rank_cores)
        expect_equal(f"{tool} lists one runtime process per rank (its pids are another namespace's: "
                     "counted, not matched)", run.world_size, counted.listed_total, run,
                     detail=f"listed: {held}; on no device of the session (other tenants): {counted.others}")
        expect_equal("each device holds one process per rank whose core is on it", counted.expected,
                     counted.listed, run)
        return
    missing = sorted(r for pid, r in ranks.items() if pid not in held)
    expect_equal(f"every rank's process uses a NeuronCore ({tool})", [], missing, run,
                 detail=f"listed: {held}")
    session_devices = {dev for dev, n in per_device.items() if n}
    others = sorted(pid for pid, dev in held.items() if pid not in ranks and dev in session_devices)
    expect_equal("no process but the ranks uses the session's devices", [], others, run,
                 detail=f"listed: {held} (other devices' processes are other tenants')")
    counts = {dev: sum(1 for pid in ranks if held.get(pid) == dev) for dev in per_device}
    expect_equal("each device holds the ranks whose cores are on it",
                 {dev: n for dev, n in per_device.items() if counts[dev]}, {d: n for d, n in counts.items() if n},
                 run)


@pytest.mark.only_tiers("trn2", reason="NeuronCores and the Neuron tools exist only on a Neuron host")
def test_the_pytest_process_holds_no_neuroncore(tier, record_property):
    """The pytest process never starts the Neuron runtime: device-backend autoload is off for
    it (``fixtures.launch.device_isolation``), torch_neuronx is not imported, it holds no
    Neuron device node open (its own open files, ``/proc/self/fd``: the runtime reaches a
    device through ``/dev/neuron*``; a check no PID namespace can blind), and ``neuron-ls -j``
    lists no core held by its pid where neuron-ls's pids are this namespace's; where they are
    not (a container: neuron-ls reports the host's pids), that is said, not counted as a
    pass. The kernel device worker, released before every launch, is the only suite process
    that may hold a core, pinned to a single one."""
    import os
    import sys

    from fixtures.launch import device_isolation, progress

    expect("torch_neuronx" not in sys.modules, "torch_neuronx is not imported in the pytest process",
           "not imported", sys.modules.get("torch_neuronx"))
    dev_dirs = sorted({"/dev", *(os.path.dirname(n) for n in (tier.detection.device_nodes if tier.detection else []))})
    expect_equal("the pytest process holds no Neuron device node open (its own /proc/self/fd)", [],
                 device_isolation.open_device_nodes(dev_dirs), detail=f"device node folders: {dev_dirs}")
    held = neuron_host.list_neuron_processes()
    expect(isinstance(held, dict), "neuron-ls -j lists the device processes", "a listing", held)
    foreign = device_isolation.foreign_pids(held)
    if foreign:
        note = (f"neuron-ls lists pids {foreign} that this PID namespace does not have (a container: the "
                f"host's pids): its listing cannot say whether pid {os.getpid()} holds a core; the open-files "
                "check above is the evidence")
        record_property("neuron_ls_pids", note)
        progress.emit(f"test_the_pytest_process_holds_no_neuroncore: {note}")
        return
    expect(os.getpid() not in held, "the pytest process uses no NeuronCore", "not listed",
           f"pid {os.getpid()} on device {held.get(os.getpid())}")


@pytest.mark.slow
def test_world_size_is_nproc(tier, titan_runs):
    """Every rank sees world size = nproc_per_node = the tier's logical cores."""
    run = require_trained(titan_runs.get(DENSE_NATIVE))
    for rank in range(tier.nproc_per_node):
        probe = run.probe(probes.parallel, rank)
        expect_equal(f"rank {rank}: world size equals the ranks launched", tier.nproc_per_node,
                     probe["world_size"], run)
        expect_equal(f"rank {rank}: the process group uses the tier's backend", tier.dist_backend,
                     probe["backend"], run)


@pytest.mark.slow
def test_dp_shard_minus_one_resolves_to_world(tier, titan_runs):
    """``data_parallel_shard_degree=-1`` resolves to the world size; TP, EP, CP, PP are 1."""
    run = require_trained(titan_runs.get(DENSE_NATIVE))
    dims = run.probe(probes.parallel, 0)["parallel_dims"]
    expect_equal("data_parallel_shard_degree=-1 shards over every rank", tier.nproc_per_node,
                 dims["dp_shard"], run)
    expect_equal("no other parallelism unless configured",
                 {"tp": 1, "ep": 1, "cp": 1, "pp": 1, "dp_replicate": 1},
                 {k: dims[k] for k in ("tp", "ep", "cp", "pp", "dp_replicate")}, run)


@pytest.mark.slow
def test_every_parameter_sharded_over_all_ranks(tier, titan_runs):
    """FSDP: every parameter is Shard(0) over a mesh of all ranks, and the local shards of
    all ranks add up to the whole parameter (read from inside the run, per rank)."""
    run = require_trained(titan_runs.get(DENSE_NATIVE))
    world = tier.nproc_per_node
    per_rank = [run.probe(probes.parallel, r)["parameters"] for r in range(world)]
    names = sorted(per_rank[0])
    expect(len(names) > 0, "the run has parameters to shard", "> 0", len(names), run)
    for name in names:
        info = per_rank[0][name]
        expect_equal(f"{name} is sharded on dim 0", ["S(0)"], info["placements"], run)
        expect_equal(f"{name} is sharded over all {world} ranks", [world], info["mesh_shape"], run)
        global_rows = info["global_shape"][0]
        rows = [p[name]["local_shape"][0] for p in per_rank]
        expect_equal(f"{name}: the ranks' shards add up to the parameter", global_rows,
                     sum(rows), run,
                     detail=f"per-rank rows: {rows}")
        expect(max(rows) == math.ceil(global_rows / world),
               f"{name}: no rank holds more than its share", math.ceil(global_rows / world),
               max(rows), run)


@pytest.mark.slow
def test_launch_line_matches_writeup(tier, titan_runs):
    """The launch is the write-up's torchrun line: its flags in order, one process per
    logical core, ``-m torchtitan.train --module M --config C``; on a tier that assigns
    NeuronCores, each rank's core is pinned before its interpreter starts (torchrun
    ``--no-python`` runs the suite's rank wrapper, which execs python on that entry), and the
    agent runs with device-backend autoload off (``fixtures.runs.plan``)."""
    run = require_trained(titan_runs.get(DENSE_NATIVE))
    argv = run.launch.argv
    pinning = tier.pinning(1)
    agents = tier.nproc_per_node if pinning is CorePinning.AGENT_PER_RANK else 1
    argvs = run.launch.node_argvs or [argv]
    expect(argv[0].endswith("torchrun") or argv[1:3] == ["-m", "torch.distributed.run"],
           "the launcher is torchrun", "torchrun", argv[0], run)
    expect_equal(f"one process per logical core ({agents} agent(s): {pinning or 'no NeuronCores'})",
                 [f"--nproc_per_node={tier.nproc_per_node // agents}"] * agents,
                 [a for line in argvs for a in line if a.startswith("--nproc")], run)
    start = argv.index(WRITEUP_FLAGS[0])
    flags = tuple(argv[start:start + len(WRITEUP_FLAGS)])
    if agents > 1:  # one rendezvous every agent joins, in place of the write-up's localhost:0
        flags = tuple("localhost:0" if prev == "--rdzv_endpoint" else a for prev, a in zip(("",) + flags, flags))
    expect_equal("the write-up's rendezvous/log flags, in order", WRITEUP_FLAGS, flags, run)
    if tier.assigns_cores:
        # the expected pin follows the trainer's device choice, read from the installed
        # torchtitan (fixtures.tiers.core_pinning, with the runtime's and TorchNeuron's sources)
        bases = (["torchneuron"] if pinning is CorePinning.TORCHNEURON_DEFAULT else
                 [str(tier.first_core + i * (tier.nproc_per_node // agents)) for i in range(agents)])
        pins = []
        for line in argvs:
            at = line.index("--no-python") if "--no-python" in line else len(line)
            pins.append(line[at + 1:at + 4])
        expect_equal(f"each rank's core is given before its interpreter starts: {pinning}",
                     [[str(RANK_WRAPPER), "--core-base", base] for base in bases], pins, run)
        expect_equal("the torchrun agent does not load TorchNeuron", "0",
                     run.launch.env_added.get("TORCH_DEVICE_BACKEND_AUTOLOAD"), run)
    entry = argv.index("torchtitan.train") - 1
    expect_equal("torchtitan.train with the tier's module and the config function",
                 ["-m", "torchtitan.train", "--module", tier.titan_module,
                  "--config", DENSE_NATIVE.config],
                 argv[entry:entry + 6], run)


@pytest.mark.slow
def test_two_nodes_match_one_node(tier, titan_runs, record_property):
    """Multi-node launch: two torchrun agents (``--nnodes=2``, one c10d rendezvous on this
    host) with half the ranks each train as one agent with all ranks: the same per-step
    losses within the tier's same_math_rtol (cpu: 1e-6: another reduction tree over the same
    ranks' gradients, equal in exact arithmetic only)."""
    one = require_trained(titan_runs.get(rank_scaling(tier)))
    two = require_trained(titan_runs.get(two_nodes(tier)))
    commands = two.launch.node_commands
    # where each rank needs an agent of its own (a trainer picking neuron:LOCAL_RANK), two nodes
    # are as many agents as ranks: fixtures.tiers.core_pinning
    agents = tier.nproc_per_node if tier.pinning(2) is CorePinning.AGENT_PER_RANK else 2
    expect_equal(f"{agents} agents were started", agents, len(commands), two)
    endpoints = {c.split("--rdzv_endpoint ", 1)[1].split(" ", 1)[0] for c in commands}
    expect(len(endpoints) == 1 and all(f"--nnodes={agents}" in c for c in commands),
           f"the agents join one rendezvous with --nnodes={agents}", "one endpoint", endpoints, two)
    expect_equal("the two agents form one world", tier.nproc_per_node,
                 two.probe(probes.parallel, 0)["world_size"], two)
    expect_close_series(two.losses(), one.losses(), tier.numerics.same_math_rtol,
                        "2 nodes x N/2 ranks train as 1 node x N ranks", two, record_property,
                        detail=f"one-node run: {one.run_dir}")
