"""InferenceServer: one model on one engine, on one GPU pool.

The pod is rendered by pure functions (``server_pod``, ``build_job_pod``) so tests and
``inferstack plan --render`` see exactly what is applied. The component feeds them to typed
``pulumi_kubernetes`` resources through the cluster's explicit provider.

Path of a model to a GPU: the model store (S3) → the model-loader init container, which fills
the node's NVMe cache once per node → the engine, which reads it from ``hostPath``.
"""

from __future__ import annotations

import math
import shlex
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field, model_validator

from components.autoscaling.keda import scaled_object
from components.catalog import images as _images
from components.catalog.charts import PROMETHEUS_POD_LABELS
from components.catalog.engine_support import check_engine_args, missing_paths
from components.catalog.instances import InstanceSpec
from components.catalog.models import MODEL_CACHE_ROOT, gguf_dir, hf_checkpoint_dir, trtllm_engine_dir
from components.kube.labels import GATEWAY_POD_LABELS, GPU_TOLERATION, POOL_LABEL
from components.kube.objects import custom_resource, namespace_peer, one_or_several
from components.observability.dashboards import MODEL_POD_LABEL
from components.serving._llamacpp import LLAMACPP_HTTP_PORT, llamacpp_args, prompt_cache_mib
from components.serving._placement import Placement, engine_build_memory_gib, host_memory_share_gib, place
from components.serving._triton import (
    MODEL_NAMES,
    TRITON_GRPC_PORT,
    TRITON_HTTP_PORT,
    engine_key,
    render_model_repository,
    trtllm_build_args,
    trtllm_checkpoint_command,
)
from components.serving._vllm import VLLM_ENTRYPOINT, VLLM_HTTP_PORT, vllm_args
from components.specs import Args, ComponentNamespace, ModelDeploySpec, ServingPool, StrInput

Fabric = Literal["efa", "rdma", "none"]
APP_LABEL = "app.kubernetes.io/name"
MODEL_LABEL = MODEL_POD_LABEL
ENGINE_LABEL = "inferstack.io/engine"
NODE_CACHE_ROOT = "/mnt/k8s-disks/0/inferstack"
"""The cache's parent on the node: nodeadm's RAID0 mount on cloud (a local NVMe mount elsewhere)."""
LOADER_UID = 65532
"""The model-loader image's user; the engines read what it wrote (files are world-readable)."""
SERVER_UID = 1000
"""Engines run as a non-root user (the Triton image's ``triton-server``); HOME points at /tmp."""
LWS_EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
RDMA_RESOURCE = "rdma/rdma_shared_device_a"
MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
WAIT = pulumi.CustomTimeouts(create="45m", update="45m")
AWS_TOPOLOGY_LABEL = "topology.k8s.aws/network-node-layer-3"
"""EC2 instance topology: the network node above a server's leaf (EKS labels nodes with it)."""


class RdmaFabric(Args):
    """What a multi-node group needs on an InfiniBand or RoCE fabric (on-prem)."""

    resource: str = RDMA_RESOURCE
    """The RDMA shared device plugin's resource, one per pod (facts-tiers §2: with IPC_LOCK)."""
    nccl_env: dict[str, str] = Field(default_factory=dict)
    """NCCL variables: ``NCCL_IB_HCA``, ``NCCL_SOCKET_IFNAME``, ``NCCL_NET_GDR_LEVEL``, ..."""
    topology_label: str = "fabric.topograph.run/tier-0"
    """Node label of the leaf switch: a group stays under one (LWS exclusive topology)."""
    network: str | None = None
    """Multus network (``namespace/name``) for the ranks' traffic, e.g. an IPoIB network."""


class ModelCacheVolume(Args):
    """Where a node keeps its model cache: a host path (cloud RAID0) or a local NVMe volume per pod."""

    host_path: str | None = MODEL_CACHE_ROOT
    """The node's NVMe mount (nodeadm RAID0 on cloud); survives pod restarts and is shared per node."""
    storage_class: str | None = None
    """Instead of ``host_path``: a generic ephemeral volume from this local-volume class, one per pod."""
    size_gib: int = Field(default=800, ge=1)


"""A GPU node may have to join and a large model load from NVMe before the workload is ready."""


class InferenceServerArgs(Args):
    spec: ModelDeploySpec
    """Required: the model, its engine, pool and SLO; everything the server runs is derived from it."""
    pool: ServingPool
    """The pool the model runs on: its GPU count, EFA and labels."""
    namespace: ComponentNamespace
    """Required: the namespace's name, known when the program runs: it goes into the KEDA query and the endpoint (a
    ``pulumi.Output`` is refused here; order the Namespace first with ``depends_on``)."""
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider; nothing uses an ambient kubeconfig."""
    model_source: StrInput
    """``s3://bucket/prefix`` of the Hugging Face checkpoint."""
    engine_store: StrInput
    """``s3://bucket``: engines live under ``<model_id>/trtllm/<engine key>/`` beside the checkpoint."""
    loader_image: StrInput
    """Required: the model-loader image the stack built and pushed (``images/model-loader``); the kit publishes none."""
    service_account: str
    """Bound to a read-only store role through workload identity (Pod Identity / IRSA)."""
    build_service_account: str = "engine-builder"
    """The engine-build Job's account: the one role allowed to write engines to the store."""
    priority_class: str
    """Required: the serving PriorityClass (``ServingBase.priority_class``): a model evicts nothing and is evicted by
    nothing lower."""
    group_priority_class: str | None = None
    """Multi-node groups' PriorityClass, above ``priority_class`` so that a group can take whole nodes from
    single-node replicas (``ServingBase.group_priority_class``); ``None``: ``priority_class``."""
    rollout_surge: bool
    """Required: whether a rollout may add a pod before it removes one. Only where a node autoscaler adds the GPU that
    pod asks for (``rollout_strategy``), or the pool has a spare one: the tier's fact (``stacks.tiers``,
    ``grows_nodes``), and on the cloud the pool's (``stacks.cloud_checks.rollout_surges``: a managed node group does
    not grow)."""
    fabric: Fabric = "efa"
    """How multi-node groups talk: EFA (cloud), RDMA over InfiniBand (on-prem) or plain TCP."""
    gateway_namespace: ComponentNamespace | tuple[ComponentNamespace, ...] = "inferstack-gateway"
    """Where the Gateway in front of this model runs: the model's NetworkPolicy admits the gateway's pods from there
    only. A model behind several gateways (one per team, each in its own namespace) lists every one."""
    monitoring_namespace: ComponentNamespace = "monitoring"
    """Where Prometheus runs: its Prometheus pods, and no other pod there, are admitted to the metrics port."""
    otlp_traces_endpoint: str | None = None
    prometheus_url: str | None = None
    """Where KEDA reads the queue depth; ``None`` leaves the model at its fixed ``replicas``."""
    gateway_aliases: tuple[str, ...] = ()
    """The gateway's route aliases that may send requests to this model (``GatewaySpec.aliases_of``): with
    ``autoscaling.scaleToZero``, requests the gateway counts under any of them wake it, as well as its own name."""
    shm_gib: int = Field(default=16, ge=1)
    """``/dev/shm`` for NCCL and the engines' shared-memory IPC between ranks."""
    rdma: RdmaFabric | None = None
    """Required with ``fabric="rdma"``: the resource, NCCL variables and topology of the fabric."""
    model_cache: ModelCacheVolume = ModelCacheVolume()
    store_claim: str | None = None
    """A pre-filled ReadOnlyMany volume to copy checkpoints from instead of an object store (``model_source``
    is then the checkpoint's path inside it)."""
    loader_env: list[dict[str, Any]] = Field(default_factory=list)
    """Extra loader env: an S3-compatible endpoint and its credentials (``secretKeyRef``) off AWS."""
    gpu_runtime_class: str | None = None
    """``runtimeClassName`` of GPU pods, e.g. k3s's ``nvidia`` (its containerd's default runtime is runc, so
    NVML finds no GPU without it: NVIDIA/k8s-device-plugin#406, k3s-io/k3s#4070). ``None``: the default runtime."""
    cpu_decoders: int = Field(default=1, ge=1)
    """llama.cpp on CPU: the chat servers decoding on this node's CPU, this one included (every replica counts; an
    edge site's ``components.edge.budget.cpu_decoders``). They share its decode threads (``llamacpp_threads``)."""

    @model_validator(mode="after")
    def _the_pool_the_model_names(self) -> InferenceServerArgs:
        # The server is placed and sized on pool, while its pods' inferstack.io/pool label, model_slos (the workload
        # its alerts read) and the edge node budget go by spec.pool: two names put the model on one pool's servers
        # and everything else looking at the other's.
        if self.spec.pool != self.pool.name:
            raise ValueError(
                f"pool: {self.pool.name!r} is not the pool spec.pool names ({self.spec.pool!r}); pass the pool named "
                "spec.pool, or set spec.pool to the pool's name"
            )
        return self


def labels(spec: ModelDeploySpec) -> dict[str, str]:
    return {
        APP_LABEL: "inferstack-model",
        MODEL_LABEL: spec.name,
        ENGINE_LABEL: spec.engine,
        POOL_LABEL: spec.pool,
    }


TRITON_OPENAI_PORT = 9000
"""Triton's OpenAI-compatible frontend (server repo, python/openai/openai_frontend/main.py, --openai-port)."""
TRITON_OPENAI_FRONTEND = "/opt/tritonserver/python/openai/openai_frontend/main.py"


def ports(spec: ModelDeploySpec) -> list[dict[str, Any]]:
    """``http`` is always the OpenAI-compatible API, which also serves ``/metrics``: what the gateway and
    Prometheus use for either engine. Triton adds its KServe v2 HTTP and gRPC frontends."""
    if spec.engine == "vllm":
        return [{"name": "http", "containerPort": VLLM_HTTP_PORT, "protocol": "TCP"}]
    if spec.engine == "llamacpp":
        return [{"name": "http", "containerPort": LLAMACPP_HTTP_PORT, "protocol": "TCP"}]
    return [
        {"name": "http", "containerPort": TRITON_OPENAI_PORT, "protocol": "TCP"},
        {"name": "kserve-http", "containerPort": TRITON_HTTP_PORT, "protocol": "TCP"},
        {"name": "grpc", "containerPort": TRITON_GRPC_PORT, "protocol": "TCP"},
    ]


def probes(spec: ModelDeploySpec) -> dict[str, Any]:
    """Each engine's real health endpoints. Startup allows 30 minutes: a 70B load from NVMe plus
    CUDA-graph capture takes minutes; liveness only starts counting after it."""

    # vLLM and llama.cpp: /health (llama.cpp answers 503 while loading, 200 once ready). Triton's OpenAI
    # frontend: /health/ready on the same port (its observability router);
    # liveness on the KServe frontend's /v2/health/live, which stays up while models (re)load: a server that
    # is alive but not ready must be taken out of the Service, not restarted.
    def http(path: str, port: str = "http") -> dict[str, Any]:
        return {"httpGet": {"path": path, "port": port}}

    ready = http("/health") if spec.engine != "triton" else http("/health/ready")
    live = http("/health") if spec.engine != "triton" else http("/v2/health/live", "kserve-http")
    return {
        "startupProbe": {**ready, "periodSeconds": 10, "failureThreshold": 180},
        "readinessProbe": {**ready, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**live, "periodSeconds": 10, "failureThreshold": 6},
    }


def _cache_volume_mounts() -> list[dict[str, Any]]:
    return [{"name": "model-cache", "mountPath": MODEL_CACHE_ROOT}]


def _loader(
    name: str,
    source: Any,
    dest: str,
    image: Any,
    include: tuple[str, ...] = (),
    upload: bool = False,
    env: list[dict[str, Any]] | None = None,
    flags: tuple[str, ...] = (),
    mounts: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    args = ["--source", source, "--dest", dest, *[a for g in include for a in ("--include", g)], *flags]
    return {
        "name": name,
        "image": image,
        "args": [*(["--upload"] if upload else []), *args],
        **({"env": env} if env else {}),
        "volumeMounts": [*_cache_volume_mounts(), *mounts],
        "resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": LOADER_UID,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _cache_owner(image: Any) -> dict[str, Any]:
    """Make the node's cache root writable by the loader. hostPath ``DirectoryOrCreate`` creates it
    root-owned and ``fsGroup`` does not apply to hostPath, so one root step with only CAP_CHOWN
    hands the top directory to the loader's UID (idempotent, nothing else on the node changes)."""
    return {
        "name": "cache-owner",
        "image": image,
        "command": ["/bin/sh", "-c", f"chown {LOADER_UID}:{LOADER_UID} {MODEL_CACHE_ROOT}"],
        "volumeMounts": _cache_volume_mounts(),
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
        },
    }


def _cache_volume(cache: ModelCacheVolume) -> dict[str, Any]:
    if cache.storage_class is None:
        return {"name": "model-cache", "hostPath": {"path": cache.host_path, "type": "DirectoryOrCreate"}}
    # A generic ephemeral volume: one local NVMe PV per pod, bound on the pod's node (WaitForFirstConsumer).
    # It lives as long as the pod, so a restarted server container reloads from NVMe, not the network.
    claim = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": cache.storage_class,
        "resources": {"requests": {"storage": f"{cache.size_gib}Gi"}},
    }
    return {"name": "model-cache", "ephemeral": {"volumeClaimTemplate": {"spec": claim}}}


def _volumes(shm_gib: int, cache: ModelCacheVolume, extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return [
        _cache_volume(cache),
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib}Gi"}},
        *(extra or []),
    ]


def _cache_inits(args: InferenceServerArgs) -> list[dict[str, Any]]:
    """hostPath needs its owner set by a root step; a PVC gets the pod's fsGroup from the kubelet instead."""
    return [_cache_owner(args.loader_image)] if args.model_cache.storage_class is None else []


def efa_interfaces_per_pod(pool: ServingPool, gpus: int, multi_node: bool) -> int:
    """EFA interfaces a pod on an EFA pool requests: its GPUs' share of the node's.

    A pod that does not request ``vpc.amazonaws.com/efa`` gets no EFA device, so the pool's EFA interfaces and
    placement group buy nothing (issue 12, point 10). Where the share is below one interface (a one-GPU pod on a
    p4d.24xlarge: 4 interfaces for 8 GPUs), a pod within one node requests none: one interface each would let only
    four such pods onto the node and idle the other GPUs, and its ranks talk over NVLink, not EFA. A pod of a group
    that spans nodes still takes one."""
    spec: InstanceSpec = pool.spec
    if not pool.efa_enabled or not spec.efa_interfaces:
        return 0
    share = spec.efa_interfaces * gpus // spec.gpu_count
    return max(1, share) if multi_node else share


def _resources(
    placement: Placement, pool: ServingPool, fabric: Fabric, multi_node: bool, rdma: RdmaFabric | None = None
) -> dict[str, Any]:
    spec = pool.spec
    gpus = placement.gpus_per_pod(spec.gpu_count)
    # A share of the host proportional to the GPUs taken, minus room for system daemons.
    memory_gib = host_memory_share_gib(spec, gpus)
    limits: dict[str, Any] = {"nvidia.com/gpu": gpus, "memory": f"{memory_gib}Gi"}
    if fabric == "efa" and (interfaces := efa_interfaces_per_pod(pool, gpus, multi_node)):
        limits[EFA_RESOURCE] = interfaces
    if multi_node and fabric == "rdma":
        limits[rdma.resource if rdma else RDMA_RESOURCE] = 1
    requests = {**limits, "cpu": str(server_cpus(spec, gpus))}
    return {"requests": requests, "limits": limits}


def server_cpus(spec: InstanceSpec, gpus: int) -> int:
    """CPUs a pod with ``gpus`` GPUs requests: 8 per GPU (tokenizer, scheduler, HTTP server), but at most three
    quarters of its GPUs' share of the node's vCPUs, which leaves the rest to the kubelet's reserve and the node's
    daemons. A request above what the instance has never schedules: a g6e.xlarge has 4 vCPUs for its one GPU."""
    vcpus: int | None = getattr(spec, "vcpus", None)  # an edge node's shape has none: it is not a cloud instance
    if vcpus is None:
        return 8 * gpus
    return max(1, min(8 * gpus, vcpus * gpus * 3 // (4 * spec.gpu_count)))


def llamacpp_threads(placement: Placement, pool: ServingPool, cpu_decoders: int = 1) -> int:
    """CPU threads of a llama.cpp server. Offloaded or embedding servers need few; the ``cpu_decoders`` CPU decoders
    of a node share half its cores (decode is bandwidth-bound: more threads than memory channels can feed buy
    nothing). Half the cores each would put two decoders at the node's every core, more than it offers pods."""
    if placement.gpu_offload or placement.model.is_embedding:
        return 2
    return max(2, getattr(pool.spec, "cpu_cores", 8) // (2 * cpu_decoders))


def llamacpp_resources(placement: Placement, pool: ServingPool, cpu_decoders: int = 1) -> dict[str, Any]:
    """Requests = what the server holds: the GGUF file (mmap) plus, on CPU, the KV cache, plus the host-memory prompt
    cache (``--cache-ram``, on GPU and CPU alike), plus 1 GiB of runtime."""
    fit = placement.fit
    resident_gb = fit.weights_gb_per_gpu + (0 if placement.gpu_offload else fit.kv_reserve_gb_per_gpu)
    prompt_cache = prompt_cache_mib(placement.model, placement.profile) * 2**20
    memory = f"{math.ceil((resident_gb * 1e9 + prompt_cache) / 2**30 + 1)}Gi"
    limits: dict[str, Any] = {"memory": memory}
    if placement.gpu_offload:
        limits["nvidia.com/gpu"] = 1
    return {"requests": {**limits, "cpu": str(llamacpp_threads(placement, pool, cpu_decoders))}, "limits": limits}


def _env(
    spec: ModelDeploySpec,
    fabric: Fabric,
    multi_node: bool,
    world_size: int = 1,
    efa: bool = False,
    rdma: RdmaFabric | None = None,
) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HUB_OFFLINE", "value": "1"}]
    if spec.engine == "triton" and world_size > 1:
        # One server process drives every rank: the TensorRT-LLM backend's orchestrator mode spawns
        # the per-GPU executor workers (``executor_worker_path`` in the rendered config) itself.
        env.append({"name": "TRTLLM_ORCHESTRATOR", "value": "1"})
    if efa:
        # facts.md, "EFA in Kubernetes": libfabric's EFA provider with device RDMA for NCCL.
        env += [{"name": "FI_PROVIDER", "value": "efa"}, {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"}]
    if multi_node and fabric == "rdma" and rdma:
        env += [{"name": k, "value": v} for k, v in sorted(rdma.nccl_env.items())]
        # vLLM's multi-node guide: each rank advertises its own pod IP (docs/serving/parallelism_scaling.md).
        env.append({"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    return env


def server_container(args: InferenceServerArgs, placement: Placement, *, role: str = "leader") -> dict[str, Any]:
    spec = args.spec
    multi_node = placement.multi_node(args.pool.spec.gpu_count)
    if spec.engine == "llamacpp":
        return _llamacpp_container(args, placement)
    if spec.engine == "vllm":
        engine_args = vllm_args(
            placement.model, spec.precision, placement.tp, placement.pp, placement.profile, spec.speculative,
            otlp_traces_endpoint=args.otlp_traces_endpoint,
        )  # fmt: skip
        # Every flag must be one the pinned image runs (components/catalog/engine_support.py).
        check_engine_args(_images.VLLM, engine_args)
        serve = [*VLLM_ENTRYPOINT, *engine_args]
        # vLLM spans nodes with Ray: the leader starts the head and serves, workers join it
        # (vLLM docs, "Deploying with LeaderWorkerSet").
        command = ["/bin/sh", "-c", ray_group_script(role, serve)] if multi_node else serve
    else:
        # Triton in-process behind its OpenAI-compatible frontend, so the gateway speaks one protocol to
        # both engines; the KServe frontends stay on for Triton-native clients. Multi-GPU engines run in
        # the TensorRT-LLM backend's orchestrator mode, so one process drives every rank.
        command = [
            "python3", TRITON_OPENAI_FRONTEND,
            "--model-repository", "/model-repo",
            "--tokenizer", hf_checkpoint_dir(placement.model.model_id),
            "--backend", "tensorrtllm",
            "--openai-port", str(TRITON_OPENAI_PORT),
            "--enable-kserve-frontends",
        ]  # fmt: skip
        check_engine_args(_images.TRITON_TRTLLM, command[2:])
        _require_paths(_images.TRITON_TRTLLM, [TRITON_OPENAI_FRONTEND])
    security: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": SERVER_UID,
        "runAsGroup": SERVER_UID,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    if multi_node and args.fabric == "rdma":
        security["capabilities"]["add"] = ["IPC_LOCK"]
    container: dict[str, Any] = {
        "name": "server",
        "image": _images.VLLM if spec.engine == "vllm" else _images.TRITON_TRTLLM,
        "command": command,
        "env": _env(
            spec,
            args.fabric,
            multi_node,
            placement.world_size,
            efa=args.fabric == "efa"
            and efa_interfaces_per_pod(args.pool, placement.gpus_per_pod(args.pool.spec.gpu_count), multi_node) > 0,
            rdma=args.rdma,
        ),
        "resources": _resources(placement, args.pool, args.fabric, multi_node, args.rdma),
        "volumeMounts": [
            *_cache_volume_mounts(),
            {"name": "dshm", "mountPath": "/dev/shm"},
            *([{"name": "model-repo", "mountPath": "/model-repo"}] if spec.engine == "triton" else []),
        ],
        "securityContext": security,
    }
    if role == "leader":
        container["ports"] = ports(spec)
        container.update(probes(spec))
    return container


RAY_PORT = 6379
_MEMLOCK_WARNING = (
    'if [ "$(ulimit -l)" != unlimited ]; then echo "inferstack: locked-memory limit $(ulimit -l) KiB: RDMA memory '
    "registration may fail and NCCL fall back to TCP (NET/Socket); raise the container runtime's limit "
    '(LimitMEMLOCK=infinity for containerd)" >&2; fi'
)
_WAIT_FOR_GROUP = """python3 - <<'PY'
import os, time, ray
ray.init(address="auto", logging_level="ERROR")
want = int(os.environ["LWS_GROUP_SIZE"])
while (alive := sum(node["Alive"] for node in ray.nodes())) < want:
    print(f"inferstack: waiting for the group's Ray nodes, {alive} of {want}", flush=True)
    time.sleep(5)
PY"""


def ray_group_script(role: str, serve: list[str]) -> str:
    """The shell script of one rank of a vLLM group on Ray (vLLM docs, "Deploying with LeaderWorkerSet").

    Each pod's init containers fetch the weights first, so the ranks come up minutes apart. The leader starts Ray's
    head, waits until all ``LWS_GROUP_SIZE`` nodes have joined, then serves; a worker retries joining until the head
    answers. Without the waits the first rank to give up would exit, and LWS recreates the whole group
    (``RecreateGroupOnPodRestart``), its local caches and downloads with it."""
    if role == "leader":
        steps = [
            f"ray start --head --port={RAY_PORT} --disable-usage-stats",
            _WAIT_FOR_GROUP,
            f"exec {shlex.join(serve)}",
        ]
    else:
        steps = [
            f"until ray start --address=$(LWS_LEADER_ADDRESS):{RAY_PORT} --disable-usage-stats --block; do",
            '  echo "inferstack: the Ray head at $(LWS_LEADER_ADDRESS) is not up yet; retrying in 5 s"; sleep 5',
            "done",
        ]
    return "\n".join(["set -e", _MEMLOCK_WARNING, *steps])


def _llamacpp_container(args: InferenceServerArgs, placement: Placement) -> dict[str, Any]:
    assert placement.gguf is not None
    return {
        "name": "server",
        "image": _images.LLAMACPP_CUDA if placement.gpu_offload else _images.LLAMACPP_CPU,
        # The image's entrypoint is llama-server; these are its arguments.
        "args": llamacpp_args(
            placement.model,
            placement.gguf,
            placement.profile,
            gpu_offload=placement.gpu_offload,
            threads=llamacpp_threads(placement, args.pool, args.cpu_decoders),
        ),
        "env": [{"name": "HOME", "value": "/tmp"}],
        "resources": llamacpp_resources(placement, args.pool, args.cpu_decoders),
        "volumeMounts": [*_cache_volume_mounts(), {"name": "dshm", "mountPath": "/dev/shm"}],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": SERVER_UID,
            "runAsGroup": SERVER_UID,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "ports": ports(args.spec),
        **probes(args.spec),
    }


def _require_paths(image: str, paths: list[str]) -> None:
    missing = missing_paths(image, paths)
    if missing:
        raise ValueError(f"{image} does not carry {', '.join(missing)} (components/catalog/engine_support.py)")


def triton_repo_script() -> str:
    """Copy exactly the models the kit renders (their ``1/model.py`` files) and overlay the rendered configs.

    Never the whole ``inflight_batcher_llm`` folder: it also holds ``tensorrt_llm_bls`` (and others) with
    unfilled ``${…}`` placeholders, and Triton waits for every model in its repository before it opens its
    port (issue 12, point 7)."""
    sources = [f"{_images.TRITON_MODEL_TEMPLATES}/{name}" for name in MODEL_NAMES]
    _require_paths(_images.TRITON_TRTLLM, sources)
    return (
        f"cp -r {' '.join(sources)} /model-repo/ && "
        'for f in /config/*__config.pbtxt; do b=$(basename "$f"); '
        'cp "$f" /model-repo/"${b%%__config.pbtxt}"/config.pbtxt; done'
    )


def _triton_repo_init(spec: ModelDeploySpec) -> dict[str, Any]:
    """Copy the rendered models' code from the image and overlay the kit's rendered configs."""
    script = triton_repo_script()
    return {
        "name": "model-repository",
        "image": _images.TRITON_TRTLLM,
        "command": ["/bin/sh", "-c", script],
        "volumeMounts": [
            {"name": "model-repo", "mountPath": "/model-repo"},
            {"name": "triton-config", "mountPath": "/config"},
        ],
        # A copy of a few files: small, but requested like every container so the scheduler can place it.
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": SERVER_UID,
            "allowPrivilegeEscalation": False,
            # sh and cp write nothing but the copies, into the model-repo volume.
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def join(*parts: Any) -> Any:
    """Concatenate strings, or Outputs (a bucket name known only after deploy) into an Output."""
    if all(isinstance(p, str) for p in parts):
        return "".join(parts)
    return pulumi.Output.concat(*parts)


def engine_prefix(args: InferenceServerArgs, placement: Placement) -> tuple[Any, str]:
    """(S3 prefix, node-local dir) of this model's TensorRT-LLM engine."""
    key = engine_key(args.pool.spec.gpu, args.spec.precision, placement.tp, placement.pp, placement.profile)
    return join(args.engine_store, f"/{placement.model.model_id}/trtllm/{key}"), trtllm_engine_dir(
        placement.model.model_id, key
    )


def _pod_common(args: InferenceServerArgs, *, group: bool = False) -> dict[str, Any]:
    return {
        "serviceAccountName": args.service_account,
        # EKS Pod Identity injects its own projected token; nothing here talks to the Kubernetes API.
        "automountServiceAccountToken": False,
        "priorityClassName": (args.group_priority_class or args.priority_class) if group else args.priority_class,
        "nodeSelector": args.pool.node_labels,
        "tolerations": [dict(GPU_TOLERATION)],
        "securityContext": {"fsGroup": LOADER_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "terminationGracePeriodSeconds": 60,
    }


STORE_MOUNT = "/mnt/model-store"


def _store_volumes(args: InferenceServerArgs) -> list[dict[str, Any]]:
    if args.store_claim is None:
        return []
    return [{"name": "model-store", "persistentVolumeClaim": {"claimName": args.store_claim, "readOnly": True}}]


def _volume_copy(args: InferenceServerArgs, dest: str, source: StrInput, name: str = "fetch-model") -> dict[str, Any]:
    """Copy a checkpoint (``source``, its folder inside the volume) from the pre-filled volume onto the pod's NVMe
    volume. A marker written last says the copy finished: a restarted container whose volume stayed skips it, and a
    half copy is redone."""
    quoted = shlex.quote(f"{STORE_MOUNT}/{source}")
    target, done = shlex.quote(dest), shlex.quote(f"{dest}/.inferstack-copied")
    script = f"test -f {done} || (rm -rf {target} && mkdir -p {target} && cp -R {quoted}/. {target}/ && touch {done})"
    container = _loader(name, "", dest, args.loader_image)
    del container["args"]
    container["command"] = ["/bin/sh", "-c", script]
    store = {"name": "model-store", "mountPath": STORE_MOUNT, "readOnly": True}
    container["volumeMounts"] = [*container["volumeMounts"], store]
    return container


def _draft_fetch(args: InferenceServerArgs) -> list[dict[str, Any]]:
    """The speculative draft (``speculative.model``, a Hugging Face id) from the store's ``<id>/hf/`` folder into the
    node-local cache, where ``--speculative-config`` names it (``SpeculativeConfig.to_json``)."""
    draft = args.spec.speculative.model if args.spec.speculative is not None else None
    if not draft:
        return []
    dest = hf_checkpoint_dir(draft)
    if args.store_claim is not None:
        return [_volume_copy(args, dest, f"{draft}/hf", name="fetch-draft")]
    source = join(args.engine_store, f"/{draft}/hf")
    return [_loader("fetch-draft", source, dest, args.loader_image, env=args.loader_env)]


def server_pod(args: InferenceServerArgs, placement: Placement, *, role: str = "leader") -> dict[str, Any]:
    """The serving pod's spec: loaders fill the NVMe cache, then the engine starts from it."""
    spec = args.spec
    model_id = placement.model.model_id
    if placement.gguf is not None:
        # llama.cpp reads one GGUF file: only that file leaves the store's <model id>/gguf/ folder.
        fetch = _loader(
            "fetch-model", args.model_source, gguf_dir(model_id), args.loader_image,
            include=(placement.gguf.file,), env=args.loader_env,
        )  # fmt: skip
    elif args.store_claim is not None:
        fetch = _volume_copy(args, hf_checkpoint_dir(model_id), args.model_source)
    else:
        # Triton reads only the tokenizer from the checkpoint (the engine has the weights).
        fetch = _loader(
            "fetch-model",
            args.model_source,
            hf_checkpoint_dir(model_id),
            args.loader_image,
            include=("tokenizer*", "*.json") if spec.engine == "triton" else (),
            env=args.loader_env,
        )
    inits = [*_cache_inits(args), fetch, *_draft_fetch(args)]
    extra_volumes: list[dict[str, Any]] = []
    if spec.engine == "triton":
        source, local = engine_prefix(args, placement)
        # Only an engine whose upload finished (the build Job's last step writes its marker): while the build runs,
        # or after it failed halfway, this init container fails and retries, and never caches part of an engine.
        flags = ("--require-finished-upload",)
        inits.append(_loader("fetch-engine", source, local, args.loader_image, env=args.loader_env, flags=flags))
        inits.append(_triton_repo_init(spec))
        extra_volumes = [
            {"name": "model-repo", "emptyDir": {}},
            {"name": "triton-config", "configMap": {"name": f"{spec.name}-triton"}},
        ]
    pod: dict[str, Any] = {
        **_pod_common(args, group=placement.multi_node(args.pool.spec.gpu_count)),
        **({"runtimeClassName": args.gpu_runtime_class} if args.gpu_runtime_class and placement.world_size else {}),
        "initContainers": inits,
        "containers": [server_container(args, placement, role=role)],
        "volumes": _volumes(args.shm_gib, args.model_cache, [*extra_volumes, *_store_volumes(args)]),
    }
    if not placement.multi_node(args.pool.spec.gpu_count):
        # Spread replicas over nodes: one node's failure takes down one replica, not all.
        pod["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {MODEL_LABEL: spec.name}},
            }
        ]
    return pod


def build_job_pod(args: InferenceServerArgs, placement: Placement) -> dict[str, Any]:
    """The TensorRT-LLM engine build: checkpoint → quantize → ``trtllm-build`` → upload to the store."""
    model = placement.model
    source, local = engine_prefix(args, placement)
    hf = hf_checkpoint_dir(model.model_id)
    checkpoint = f"{local}.checkpoint"
    # Built beside, never into, the cache folder the server's loader fills (and marks complete) itself.
    built = f"{local}.build"
    quantize = trtllm_checkpoint_command(
        model, args.spec.precision, placement.tp, placement.pp, hf_dir=hf, checkpoint_dir=checkpoint
    )
    build = trtllm_build_args(
        model, args.spec.precision, placement.tp, placement.pp, placement.profile,
        checkpoint_dir=checkpoint, output_dir=built, workers=placement.world_size,
    )  # fmt: skip
    # Quantize and build in TensorRT-LLM's release image: it carries the quantize script the Triton image
    # lacks, and the same TensorRT-LLM (1.0.0) as Triton 25.09's backend, which must load the engine.
    _require_paths(_images.TRTLLM_BUILD, [quantize[1]])
    check_engine_args(_images.TRTLLM_BUILD, [*quantize[2:], *build[1:]])
    # Quantization loads the BF16 checkpoint into host memory before it moves to the GPUs: request that much, or the
    # kubelet OOM-kills a 70B build; never more than the node gives its GPUs, or the Job never schedules.
    memory_gib = engine_build_memory_gib(model, args.pool.spec, placement.world_size)
    # The Job is replaced, and so run again, by any change to its pod template (pulumi-kubernetes replaces a Job on a
    # .spec.template diff), not only by a change of the engine, whose key names its folder. Its first step looks for a
    # finished upload of this engine in the store; when there is one, every other step does nothing.
    present = f"{BUILD_STATE_DIR}/engine-present"
    state = ({"name": "build-state", "mountPath": BUILD_STATE_DIR},)
    unless = ("--unless", present)
    builder = {
        "name": "trtllm-build",
        "image": _images.TRTLLM_BUILD,
        "command": [
            "/bin/sh",
            "-c",
            f"if [ -e {present} ]; then echo 'engine already in the store: nothing to build'; exit 0; fi; "
            f"{shlex.join(quantize)} && {shlex.join(build)} && rm -rf {shlex.quote(checkpoint)}",
        ],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "resources": {
            "limits": {"nvidia.com/gpu": placement.world_size, "memory": f"{memory_gib}Gi"},
            "requests": {
                "nvidia.com/gpu": placement.world_size,
                "cpu": str(server_cpus(args.pool.spec, placement.world_size)),
                "memory": f"{memory_gib}Gi",
            },
        },
        "volumeMounts": [*_cache_volume_mounts(), {"name": "dshm", "mountPath": "/dev/shm"}, *state],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": LOADER_UID,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    return {
        **_pod_common(args),
        # The build runs on GPUs like the server, so it takes the server's RuntimeClass (``gpu_runtime_class``): on
        # k3s, whose containerd keeps runc as its default runtime, a GPU pod without runtimeClassName: nvidia gets the
        # device plugin's NVIDIA_VISIBLE_DEVICES but no NVIDIA hook, so no driver and no device, and quantize.py finds
        # no CUDA device (NVIDIA/k8s-device-plugin#406, k3s-io/k3s#4070; the class: k3s manifests/runtimes.yaml).
        **({"runtimeClassName": args.gpu_runtime_class} if args.gpu_runtime_class else {}),
        # Its own account: the only role that may write engines to the store (the servers' loader only reads).
        "serviceAccountName": args.build_service_account,
        "restartPolicy": "OnFailure",
        "initContainers": [
            *_cache_inits(args),
            _engine_probe(args, source, present, state),
            _loader(
                "fetch-model", args.model_source, hf, args.loader_image, env=args.loader_env, flags=unless, mounts=state
            ),
            builder,
        ],
        "containers": [
            _loader(
                "publish-engine",
                source,
                built,
                args.loader_image,
                upload=True,
                env=args.loader_env,
                flags=unless,
                mounts=state,
            )
        ],
        "volumes": _volumes(args.shm_gib, args.model_cache, [{"name": "build-state", "emptyDir": {}}]),
    }


BUILD_STATE_DIR = "/build-state"
"""An emptyDir the engine-build Job's steps share: the probe's marker that the engine is in the store already."""


def _engine_probe(
    args: InferenceServerArgs, source: Any, present: str, state: tuple[dict[str, Any], ...]
) -> dict[str, Any]:
    """The build Job's first step: writes ``present`` when the store holds a finished upload of this engine."""
    probe = _loader("engine-in-store", source, "", args.loader_image, env=args.loader_env, mounts=state)
    probe["args"] = ["--source", source, "--probe", present]
    probe["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    return probe


def autoscaler(args: InferenceServerArgs, placement: Placement, workload_kind: str) -> dict[str, Any] | None:
    """The model's KEDA ScaledObject, or ``None`` for a deliberate fixed size."""
    spec = args.spec
    scaling = spec.autoscaling
    if not scaling.enabled or args.prometheus_url is None:
        return None
    return scaled_object(
        model=spec.name,
        namespace=args.namespace,
        engine=spec.engine,
        threshold=spec.queue_target,
        max_replicas=spec.replica_ceiling,
        min_replicas=0 if scaling.scale_to_zero else max(1, spec.replicas),
        scale_to_zero=scaling.scale_to_zero,
        target_kind=workload_kind,  # type: ignore[arg-type]
        target_name=spec.name,
        server_address=args.prometheus_url,
        wake_aliases=args.gateway_aliases,
        gateway_namespaces=gateway_namespaces(args),
    )


def gateway_namespaces(args: InferenceServerArgs) -> tuple[str, ...]:
    """Where the gateways in front of the model run (``gateway_namespace``, one or several)."""
    return one_or_several(args.gateway_namespace)


def network_policy(args: InferenceServerArgs) -> dict[str, Any]:
    """Only the gateway reaches the serving ports, only Prometheus the metrics port.

    The metrics port is vLLM's and llama.cpp's API port too (``/metrics`` beside ``/v1``): a peer of the whole
    monitoring namespace would let Grafana, Alertmanager or an exporter call the model past the gateway's keys and
    rate limits, so the peer is Prometheus's own pods there."""
    spec = args.spec
    serving = [{"port": p["name"], "protocol": "TCP"} for p in ports(spec)]
    metrics = [{"port": "http", "protocol": "TCP"}]

    gateway_pods = {"podSelector": {"matchLabels": dict(GATEWAY_POD_LABELS)}}
    ingress = [
        {
            "from": [{**namespace_peer(gateway), **gateway_pods} for gateway in gateway_namespaces(args)],
            "ports": serving,
        },
        {
            "from": [
                {
                    **namespace_peer(args.monitoring_namespace),
                    "podSelector": {"matchLabels": dict(PROMETHEUS_POD_LABELS)},
                }
            ],
            "ports": metrics,
        },
    ]
    # Ranks of a multi-node group talk to each other (Ray, NCCL bootstrap) on any port.
    ingress.append({"from": [{"podSelector": {"matchLabels": {MODEL_LABEL: spec.name}}}]})
    return {"podSelector": {"matchLabels": {MODEL_LABEL: spec.name}}, "policyTypes": ["Ingress"], "ingress": ingress}


def rollout_strategy(surge: bool) -> dict[str, Any]:
    """How a model's Deployment replaces its pods.

    Where nodes grow (``surge``), the new pod comes up first and the serving count never drops: a node autoscaler
    adds the GPU it asks for. On fixed hardware that extra pod would ask for a GPU no node has; it would stay
    Pending and the rollout would never finish (a one-GPU site, a full on-prem fleet). There one pod goes, then its
    replacement comes: a one-replica model is down while the new pod loads, as it would be under ``Recreate``."""
    if surge:
        return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
"""Set by the Job controller on each pod of a Job (Kubernetes "Well-Known Labels, Annotations and Taints", 1.27+)."""


def disruption_budget(spec: ModelDeploySpec, selector: dict[str, Any]) -> dict[str, Any]:
    """Keep at least half the replicas serving through voluntary evictions (node drains, Karpenter expiry).

    ``minAvailable``: a percentage follows KEDA's replica count (2 -> 1, 8 -> 4 must stay up). Not with one
    replica: 50 % of 1 rounds up to 1, no eviction is ever allowed and ``kubectl drain`` waits for ever
    (https://kubernetes.io/docs/tasks/run-application/configure-pdb/, "Rounding logic when specifying
    percentages", v1.35). A single replica cannot keep serving through a drain anyway, so it may be evicted
    (``maxUnavailable: 1``).

    The budget leaves out the pods of a Job (a Triton model's engine build carries the model's labels): for a
    percentage or ``maxUnavailable`` the disruption controller asks each selected pod's owner for its scale, a Job
    has none, and the budget then fails to sync with ``disruptionsAllowed: 0`` ("jobs.batch does not implement the
    scale subresource", ``getScaleController`` in kubernetes pkg/controller/disruption/disruption.go), so no server
    pod could be evicted while the finished build pod is kept."""
    budget_selector = {**selector, "matchExpressions": [{"key": JOB_NAME_LABEL, "operator": "DoesNotExist"}]}
    if spec.replicas <= 1:
        return {"maxUnavailable": 1, "selector": budget_selector}
    return {"minAvailable": "50%", "selector": budget_selector}


class InferenceServer(pulumi.ComponentResource):
    """A Deployment (fits one node) or a LeaderWorkerSet (spans nodes), its Service, PDB and NetworkPolicy."""

    service_name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    """In-cluster base URL of the OpenAI-compatible API (vLLM) or Triton's HTTP endpoint."""
    workload_kind: str
    placement: Placement
    triton_configs: dict[str, str]

    def __init__(self, name: str, args: InferenceServerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:inference_server:InferenceServer", name, None, opts)
        spec = args.spec
        placement = place(spec, args.pool)
        self.placement = placement
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)
        meta = {"name": spec.name, "namespace": args.namespace, "labels": labels(spec)}
        selector = {"matchLabels": {MODEL_LABEL: spec.name}}
        template_meta = {"labels": labels(spec)}
        multi_node = placement.multi_node(args.pool.spec.gpu_count)
        self.workload_kind = placement.workload_kind(args.pool.spec.gpu_count)
        scaler = autoscaler(args, placement, self.workload_kind)
        # KEDA owns the replica count once it scales the workload; Pulumi must not reset it.
        owned_by_keda = ["spec.replicas"] if scaler else []

        self.triton_configs = {}
        depends: list[pulumi.Resource] = []
        if spec.engine == "triton":
            self.triton_configs = render_model_repository(
                placement.model,
                placement.profile,
                placement.tp,
                placement.pp,
                precision=spec.precision,
                gpu=args.pool.spec.gpu,
            )
            depends.append(
                k8s.core.v1.ConfigMap(
                    f"{name}-triton",
                    metadata={**meta, "name": f"{spec.name}-triton"},
                    data={path.replace("/", "__"): text for path, text in self.triton_configs.items()},
                    opts=k8s_opts,
                )
            )
            depends.append(
                k8s.batch.v1.Job(
                    f"{name}-engine-build",
                    metadata={**meta, "name": f"{spec.name}-engine-build"},
                    spec={
                        "backoffLimit": 2,
                        "template": {"metadata": template_meta, "spec": build_job_pod(args, placement)},
                    },
                    # The server pods fetch the engine this Job publishes: `pulumi up` waits for it.
                    opts=pulumi.ResourceOptions(
                        parent=self, provider=args.provider, custom_timeouts=pulumi.CustomTimeouts(create="120m")
                    ),
                )
            )

        if multi_node:
            group_meta: dict[str, Any] = dict(template_meta)
            if args.fabric == "rdma" and args.rdma and args.rdma.network:
                # Multus attaches the fabric network to every rank (Network Operator examples, ipoib).
                group_meta["annotations"] = {MULTUS_NETWORKS: args.rdma.network}
            workload: pulumi.Resource = k8s.apiextensions.CustomResource(
                name,
                api_version="leaderworkerset.x-k8s.io/v1",
                kind="LeaderWorkerSet",
                metadata={
                    **meta,
                    # Keep a group inside one network domain (the EC2 spine, or the IB leaf switch on-prem):
                    # NCCL across stages then stays off the oversubscribed upper layers.
                    "annotations": {
                        LWS_EXCLUSIVE_TOPOLOGY: args.rdma.topology_label if args.rdma else AWS_TOPOLOGY_LABEL
                    },
                },
                spec={
                    "replicas": spec.replicas,
                    "startupPolicy": "LeaderCreated",
                    "leaderWorkerTemplate": {
                        "size": placement.pods_per_group(args.pool.spec.gpu_count),
                        "restartPolicy": "RecreateGroupOnPodRestart",
                        "leaderTemplate": {
                            "metadata": group_meta,
                            "spec": server_pod(args, placement, role="leader"),
                        },
                        "workerTemplate": {
                            "metadata": group_meta,
                            "spec": server_pod(args, placement, role="worker"),
                        },
                    },
                },
                opts=pulumi.ResourceOptions(
                    parent=self,
                    provider=args.provider,
                    depends_on=depends,
                    custom_timeouts=WAIT,
                    ignore_changes=owned_by_keda,
                ),
            )
        else:
            workload = k8s.apps.v1.Deployment(
                name,
                metadata=meta,
                spec={
                    "replicas": spec.replicas,
                    "selector": selector,
                    "strategy": rollout_strategy(args.rollout_surge),
                    "template": {"metadata": template_meta, "spec": server_pod(args, placement)},
                },
                opts=pulumi.ResourceOptions(
                    parent=self,
                    provider=args.provider,
                    depends_on=depends,
                    custom_timeouts=WAIT,
                    ignore_changes=owned_by_keda,
                ),
            )

        # A LeaderWorkerSet's controller creates a headless Service named after it, the subdomain of every pod of its
        # groups: LWS_LEADER_ADDRESS is <name>-0.<name>.<namespace> (kubernetes-sigs/lws reconcileHeadlessServices,
        # subdomainPolicy Shared). It leaves an existing Service of that name alone, so the group's clients go through
        # their own, as upstream's vLLM example does (vllm-leader beside the vllm LeaderWorkerSet).
        service_name = f"{spec.name}-leader" if multi_node else spec.name
        service = k8s.core.v1.Service(
            name,
            metadata={**meta, "name": service_name},
            spec={
                "selector": {
                    **selector["matchLabels"],
                    **({"leaderworkerset.sigs.k8s.io/worker-index": "0"} if multi_node else {}),
                },
                "ports": [
                    {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"]} for p in ports(spec)
                ],
            },
            opts=k8s_opts,
        )
        k8s.policy.v1.PodDisruptionBudget(
            name,
            metadata=meta,
            spec=disruption_budget(spec, selector),
            opts=k8s_opts,
        )
        k8s.networking.v1.NetworkPolicy(name, metadata=meta, spec=network_policy(args), opts=k8s_opts)

        if scaler:
            custom_resource(
                f"{name}-scaler",
                scaler,
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[workload]),
            )
        self.autoscaled = scaler is not None

        port = ports(spec)[0]["containerPort"]
        self.service_name = service.id.apply(lambda _: service_name)
        self.endpoint = pulumi.Output.concat("http://", self.service_name, ".", args.namespace, ".svc:", str(port))
        self._workload = workload
        self.register_outputs({"service_name": self.service_name, "endpoint": self.endpoint})
