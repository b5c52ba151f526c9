"""The trn2 tier's launches rendered for EKS (``fixtures.launch.backends.kubernetes``), validated:
every pod template as a Kubernetes ``PodTemplate`` and every DRA ``ResourceClaimTemplate``
against Kubernetes' own published schemas (``kubernetes-validate``, strict: an unknown field is
an error, as ``kubectl apply --validate=strict`` makes it), and the PyTorchJob around them
against the Kubeflow training operator's API (``PYTORCHJOB_SCHEMA`` below, with jsonschema).

The PyTorchJob schema is transcribed from the operator's API types, not copied from its CRD
file (this workplace keeps fetched repository files out of commits): kubeflow/training-operator
``pkg/apis/kubeflow.org/v1/pytorch_types.go`` (PyTorchJobSpec: runPolicy, elasticPolicy,
pytorchReplicaSpecs, nprocPerNode as a string; replica types Master and Worker) and
``common_types.go`` (ReplicaSpec: replicas, template, restartPolicy Always|OnFailure|Never|
ExitCode; RunPolicy: cleanPodPolicy All|Running|None, ttlSecondsAfterFinished,
activeDeadlineSeconds, backoffLimit, schedulingPolicy; newer releases add suspend, managedBy).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from fixtures.launch.backends import kubernetes
from fixtures.runs.plan import launch_plan
from fixtures.runs.spec import RunSpec
from fixtures.tiers import tier_profile

pytestmark = pytest.mark.meta

QWEN3_4B = Path(__file__).parent / "models" / "Qwen3-4B-Instruct-2507"
KUBERNETES = "1.34"  # the Neuron DRA driver's minimum ("Please use K8s control plane 1.34+", deploy/eks/dra.rst)

_REPLICA = {"type": "object", "additionalProperties": False, "required": ["template"], "properties": {
    "replicas": {"type": "integer", "minimum": 0},
    "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
    "template": {"type": "object"}}}  # a PodTemplateSpec: validated against Kubernetes' schema below
PYTORCHJOB_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v1"},
        "kind": {"const": "PyTorchJob"},
        "metadata": {"type": "object"},  # an ObjectMeta: validated with the templates below
        "status": {"type": "object"},
        "spec": {"type": "object", "additionalProperties": False, "required": ["pytorchReplicaSpecs"], "properties": {
            "runPolicy": {"type": "object", "additionalProperties": False, "properties": {
                "cleanPodPolicy": {"enum": ["All", "Running", "None"]},
                "ttlSecondsAfterFinished": {"type": "integer"}, "activeDeadlineSeconds": {"type": "integer"},
                "backoffLimit": {"type": "integer"}, "schedulingPolicy": {"type": "object"},
                "suspend": {"type": "boolean"}, "managedBy": {"type": "string"}}},
            "elasticPolicy": {"type": "object"},
            "nprocPerNode": {"type": "string"},
            "pytorchReplicaSpecs": {"type": "object", "additionalProperties": False, "minProperties": 1,
                                    "properties": {"Master": _REPLICA, "Worker": _REPLICA}}}}}}


def _validators():
    try:
        import jsonschema
        import kubernetes_validate
    except ImportError as exc:
        pytest.fail(f"{exc}: the manifests' validators come with the suite's dev extra "
                    "(bash scripts/setup-venv.sh installs .[cpu,dev])", pytrace=False)
    return jsonschema, kubernetes_validate


def validate(manifests: list[dict]) -> None:
    """Each manifest against its published schema; raises the validator's own error."""
    jsonschema, kubernetes_validate = _validators()
    for manifest in manifests:
        if manifest["kind"] == "PyTorchJob":
            jsonschema.Draft202012Validator(PYTORCHJOB_SCHEMA).validate(manifest)
            for replica in manifest["spec"]["pytorchReplicaSpecs"].values():
                kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": manifest["metadata"],
                                              "template": replica["template"]}, KUBERNETES, strict=True)
        else:
            kubernetes_validate.validate(manifest, KUBERNETES, strict=True)


def _manifests(instance: str, nnodes: int, lnc: int = 2, dra: bool = False, spec: RunSpec | None = None):
    tier = tier_profile.trn2_profile(instance, lnc, QWEN3_4B)
    spec = spec or RunSpec(config="dense_native", nproc=nnodes * tier.nproc_per_node, nnodes=nnodes)
    backend = kubernetes.KubernetesBackend(devices="dra" if dra else "device-plugin", image="example/neuron:1",
                                           shared_dir=Path("/fsx"))
    plan = launch_plan(spec, tier, Path("/fsx/conformance/runs/x"), hf_assets=QWEN3_4B.resolve(),
                       dataset=Path("/fsx/conformance/datasets/c4"), rdzv_endpoint=backend.rendezvous_endpoint(nnodes),
                       nodes_share_host=False)
    return backend.manifests(f"conformance-{instance}-{nnodes}", plan.node_argvs, plan.env, plan.nproc_per_node, tier)


SHAPES = [("trn2.48xlarge", 1), ("trn2.48xlarge", 2), ("trn2u.48xlarge", 2), ("trn2u.48xlarge", 4)]


@pytest.mark.parametrize("dra", [False, True], ids=["device_plugin", "dra"])
@pytest.mark.parametrize(("instance", "nnodes"), SHAPES)
def test_the_trn2_launches_validate_against_the_published_schemas(instance, nnodes, dra):
    """2 x trn2.48xlarge (128 ranks at LNC=2), the trn2u UltraServer's 2- and 4-node shapes and
    one node, with the device plugin's resources or a DRA claim: every manifest validates."""
    validate(_manifests(instance, nnodes, dra=dra))


def test_a_pod_asks_for_what_the_neuron_eks_docs_name():
    """Per pod (one per node): 16 Neuron devices for 64 ranks at LNC=2, 16 EFA devices, a
    memory-backed /dev/shm, the shared claim at the shared folder's path, the instance type as a
    node selector, the LNC in the environment, EFA and the runtime's root communicator on the
    Master; the rendezvous at the Master the operator names, node rank from its RANK."""
    job = _manifests("trn2.48xlarge", 2)[0]
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1 and job["spec"]["nprocPerNode"] == "64"
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["name"] == "pytorch" and container["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    assert container["resources"]["limits"] == {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "16"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert {"name": "shared", "mountPath": "/fsx"} in container["volumeMounts"]
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "trn2.48xlarge"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NEURON_LOGICAL_NC_CONFIG"] == "2" and env["FI_PROVIDER"] == "efa"
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1" and env["NEURON_RT_ROOT_COMM_ID"] == "$(MASTER_ADDR):23457"
    args = container["args"]
    assert args[args.index("--rdzv_endpoint") + 1] == "$(MASTER_ADDR):$(MASTER_PORT)"
    assert "--node_rank=$(RANK)" in args and "--nnodes=2" in args and "--nproc_per_node=64" in args
    assert args[args.index("--core-base") + 1] == "0"  # each pod a host of its own: its ranks from its first core
    assert container["command"] == ["torchrun"] and "python" in args


def test_dra_claims_every_device_of_the_node_at_the_runs_lnc():
    claim, job = _manifests("trn2.48xlarge", 2, lnc=1, dra=True)
    request = claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == "neuron.aws.com" and request["allocationMode"] == "All"
    assert "instanceType == 'trn2.48xlarge'" in request["selectors"][0]["cel"]["expression"]
    assert claim["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["logicalNeuronCore"] == 1
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "neurons", "resourceClaimTemplateName": claim["metadata"]["name"]}]
    assert pod["containers"][0]["resources"]["claims"] == [{"name": "neurons"}]
    assert "aws.amazon.com/neuron" not in pod["containers"][0]["resources"]["limits"]
    assert job["spec"]["nprocPerNode"] == "128"  # LNC=1: 128 logical cores a node


def _broken(manifests, where):
    broken = copy.deepcopy(manifests)
    where(broken)
    return broken


BREAKS = {
    "a misspelt container field": lambda m: m[-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    ["containers"][0].__setitem__("volumeMount", []),
    "a replica count as text": lambda m: m[-1]["spec"]["pytorchReplicaSpecs"]["Worker"].__setitem__("replicas", "1"),
    "an unknown replica type": lambda m: m[-1]["spec"]["pytorchReplicaSpecs"].__setitem__("Launcher", {"template": {}}),
    "a restart policy the operator lacks": lambda m: m[-1]["spec"]["pytorchReplicaSpecs"]["Master"].__setitem__(
        "restartPolicy", "Sometimes"),
    "an env value that is not text": lambda m: m[-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    ["containers"][0]["env"].append({"name": "X", "value": 1}),
    "a claim request without its device class": lambda m: m[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    .pop("deviceClassName"),
}


@pytest.mark.parametrize("break_it", sorted(BREAKS))
def test_each_validator_refuses_a_broken_manifest(break_it):
    """The validation can fail: each break, made where a real mistake would be, is refused."""
    import jsonschema

    _validators()
    from kubernetes_validate.utils import ValidationError

    manifests = _manifests("trn2.48xlarge", 2, dra=True)
    validate(manifests)
    with pytest.raises((jsonschema.ValidationError, ValidationError)):
        validate(_broken(manifests, BREAKS[break_it]))
