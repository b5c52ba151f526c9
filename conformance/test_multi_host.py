"""Multi-host contracts: trn2 clusters as users run them (2 x trn2.48xlarge, 128 ranks at LNC=2;
the Trn2 UltraServer's 2- and 4-node shapes), planned from the instance tables and checked on
the launch lines the Slurm back end submits. Nothing here launches.

Facts: an instance's logical cores (``logical-neuroncore-config.rst``: 64 on a trn2.48xlarge at
LNC=2, 128 at LNC=1); an UltraServer is four trn2u.48xlarge (``trn2-arch.rst``), of which a job
uses 4, 2 or 1 (``deploy/eks/ultraserver.rst``); the EFA and root-communicator settings of a
multi-node run (``fixtures.launch.backends.neuron_multinode``, each with its source).
"""

from __future__ import annotations

import pytest

from fixtures.contract import expect, expect_equal
from fixtures.launch.backends import slurm_job
from fixtures.runs import memory_plan
from fixtures.runs.plan import launch_plan
from fixtures.runs.spec import RunSpec
from fixtures.tiers import cluster_shapes, tier_profile, topology
from fixtures.tiers.core_pinning import CorePinning

pytestmark = pytest.mark.topology

SHAPES = {s.name: s for s in cluster_shapes.CLUSTER_SHAPES}
# Logical cores per host, from the write-up's table (CONTRACTS.md "Topology"), and the hosts each
# shape names: the expected world sizes, from outside the code under test.
DOCUMENTED_RANKS = {"2 x trn2.48xlarge": 2 * 64, "2 x trn2.48xlarge at LNC=1": 2 * 128,
                    "Trn2 UltraServer, 2 of its nodes": 2 * 64, "Trn2 UltraServer, all 4 nodes": 4 * 64}


def _host_profile(tier, shape, assets):
    """The trn2 profile of one host of ``shape``, with the tier's model (trn2: its folder; cpu:
    the suite's tiny tied checkpoint)."""
    return tier_profile.trn2_profile(shape.instance, shape.lnc, tier.model_dir or assets.hf_dir(tied=True))


def _spec(shape) -> RunSpec:
    return RunSpec(config="dense_native", steps=10, nproc=shape.ranks, nnodes=shape.nodes)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_cluster_has_one_rank_per_logical_core_of_every_host(name):
    """The world of a launch over the cluster: every logical core of every host, one rank each."""
    expect_equal(f"{name}: world size", DOCUMENTED_RANKS[name], SHAPES[name].ranks)


@pytest.mark.parametrize("nodes", [3, 8])
def test_an_ultraserver_job_uses_one_two_or_four_of_its_nodes(nodes):
    with pytest.raises(topology.TopologyError, match="uses 1, 2, 4 of its 4 nodes"):
        cluster_shapes.ClusterShape("x", cluster_shapes.ULTRASERVER_INSTANCE, nodes)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_host_runs_one_agent_of_all_its_cores_from_its_first(tier, assets, name, tmp_path):
    """On a cluster (each node a host of its own) every node's torchrun agent runs the host's
    logical cores as ranks, each rank pinned from the host's first core (LOCAL_RANK restarts at
    0 on each host); all agents join one rendezvous with ``--nnodes`` = the hosts. On one host
    (the local back end's agents) the same run would split the host's cores instead."""
    shape = SHAPES[name]
    host = _host_profile(tier, shape, assets)
    plan = launch_plan(_spec(shape), host, tmp_path / "run", hf_assets=host.model_dir, dataset=tmp_path / "data",
                       rdzv_endpoint=slurm_job.RDZV_ENDPOINT, nodes_share_host=False)
    expect_equal(f"{name}: one agent per host", shape.nodes, len(plan.node_argvs))
    expect_equal(f"{name}: ranks per agent", shape.ranks_per_node, plan.nproc_per_node)
    for argv in plan.node_argvs:
        expect(f"--nnodes={shape.nodes}" in argv and f"--nproc_per_node={shape.ranks_per_node}" in argv,
               f"{name}: every agent joins the cluster's rendezvous with all its host's cores",
               f"--nnodes={shape.nodes} --nproc_per_node={shape.ranks_per_node}", argv)
        expect_equal(f"{name}: one rendezvous endpoint", slurm_job.RDZV_ENDPOINT,
                     argv[argv.index("--rdzv_endpoint") + 1])
    bases = [argv[argv.index("--core-base") + 1] for argv in plan.node_argvs]
    # from its first core as the trainer needs it (fixtures.tiers.core_pinning): pinned there, or
    # left to TorchNeuron, which takes LOCAL_RANK from 0, where the trainer picks neuron:LOCAL_RANK
    base = "torchneuron" if host.pinning(1) is CorePinning.TORCHNEURON_DEFAULT else str(host.first_core)
    expect_equal(f"{name}: each host's ranks from its own first core ({host.pinning(1)})", [base] * shape.nodes,
                 bases)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_slurm_job_of_the_cluster_carries_efa_and_the_root_communicator(tier, assets, name, tmp_path):
    """The Slurm job of a trn2 launch over several hosts gives every rank FI_PROVIDER=efa,
    FI_EFA_USE_DEVICE_RDMA=1 (setup-trn1-multi-node-execution.rst) and NEURON_RT_ROOT_COMM_ID on
    the first node and a port free there (nrt-developer-guide.rst, nccom-test.rst)."""
    from fixtures.launch.backends.neuron_multinode import multinode_env

    shape = SHAPES[name]
    host = _host_profile(tier, shape, assets)
    plan = launch_plan(_spec(shape), host, tmp_path / "run", hf_assets=host.model_dir, dataset=tmp_path / "data",
                       rdzv_endpoint=slurm_job.RDZV_ENDPOINT, nodes_share_host=False)
    script = slurm_job.batch_script(plan.node_argvs, python="python3", env=plan.env,
                                    runtime_env=multinode_env("{RDZV_HOST}:{NEURON_COMM_PORT}", user_env={}))
    for line in ("  export FI_PROVIDER=efa", "  export FI_EFA_USE_DEVICE_RDMA=1",
                 '  export NEURON_RT_ROOT_COMM_ID="${RDZV_HOST}":"${NEURON_COMM_PORT}"',
                 f"#SBATCH --nodes={shape.nodes}"):
        expect(line in script.splitlines(), f"{name}: the job script has {line.strip()!r}", line, script[:3000])


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_host_divides_the_fp32_state(tier, assets, name):
    """FSDP shards over every rank of the cluster: a rank's fp32 state (weights, gradients, AdamW's
    two moments) on the cluster is one host's share times the host's ranks over the cluster's."""
    shape = SHAPES[name]
    host = _host_profile(tier, shape, assets)
    hf = memory_plan.model_config(host)
    one_host = memory_plan.memory_plan(RunSpec(config="dense_native", steps=10), host, hf)
    cluster = memory_plan.memory_plan(_spec(shape), host, hf)
    params = cluster.shape.parameters * memory_plan.STATE_BYTES_PER_PARAMETER
    expect_equal(f"{name}: state per rank = 16 bytes x parameters / {shape.ranks} ranks", -(-params // shape.ranks),
                 cluster.state)
    expect(cluster.state * shape.nodes <= one_host.state + shape.nodes, f"{name}: {shape.nodes} hosts divide "
           "one host's state per rank by as many", f"<= {one_host.state} / {shape.nodes}", cluster.state)
