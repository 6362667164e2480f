"""Config sections of the on-prem tier: an existing bare-metal Kubernetes cluster on InfiniBand.

Pure pydantic models (no Pulumi, no AWS): ``stacks.environment`` validates a stack file into them and
the on-prem components read them. Sources for each fact are cited where it is used.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from components.catalog.instances import GPUS, GpuSpec, InstanceSpec
from components.specs import (
    BucketName,
    Cidr,
    DnsLabel,
    EndpointUrl,
    LabelKey,
    LabelValue,
    S3CompatibleStoreSpec,
    SecretConfigName,
    Spec,
    _repeated,
    catalog_member,
    config_error,
    described,
)


class SystemNodesSpec(Spec):
    """The CPU servers ``systemNodeSelector`` picks, so the plan can refuse system pods that do not fit them."""

    count: int = Field(ge=1)
    """Required: how many servers the selector picks (``kubectl get nodes -l <selector>``)."""
    cpu: int = Field(ge=2)
    """Required: CPU cores of each (``kubectl get node <name> -o jsonpath='{.status.capacity.cpu}'``)."""
    memory_gib: int = Field(ge=4)
    """Required: RAM of each, in GiB."""
    reserved_cpu: float = Field(default=2.0, ge=0)
    """Cores each keeps from the kit's pods: the kubelet's reserves (capacity less allocatable) and what the cluster's
    own pods there request (a CNI agent, kube-proxy, CoreDNS, a control plane's static pods)."""
    reserved_memory_gib: float = Field(default=4.0, ge=0)
    """Memory each keeps from the kit's pods, in GiB: the kubelet's reserves and eviction threshold, and what the
    cluster's own pods there request."""

    @field_validator("reserved_cpu", "reserved_memory_gib")
    @classmethod
    def _leaves_room(cls, value: float, info: ValidationInfo) -> float:
        cpu = info.field_name == "reserved_cpu"
        key, unit = ("cpu", "cores") if cpu else ("memoryGib", "GiB")
        whole = info.data.get("cpu" if cpu else "memory_gib")
        if whole is not None and value >= whole:
            raise config_error(
                f"all of each server's {whole} {unit}",
                allowed=f"less than {key} ({whole} {unit}): the rest is what the kit's pods get",
                fix=f"set it to what the kubelet and the cluster's own pods take (kubectl describe node), or raise "
                f"{key}",
            )
        return value


class OnpremClusterSpec(Spec):
    """How the kit reaches the existing cluster. The kubeconfig itself is a Pulumi secret, never a file path."""

    kubeconfig_secret: SecretConfigName = "kubeconfig"
    """Name of the secret config value holding the kubeconfig (``pulumi config set --secret inferstack:<name>``)."""
    context: str | None = None
    """Context inside that kubeconfig; defaults to its ``current-context``."""
    system_node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    """Labels of the CPU nodes that run controllers, the gateway, the cache and observability; ``{}``: any
    node without the GPU taint."""
    system_nodes: SystemNodesSpec | None = None
    """The servers ``systemNodeSelector`` picks. Set, the plan refuses system pods that do not fit them and a cache
    larger than one of them; unset, their capacity is not checked."""


class OnpremGpuPoolSpec(Spec):
    """A fixed set of bare-metal GPU servers, found by the labels GPU Feature Discovery publishes."""

    name: DnsLabel
    """Required: the models' ``pool`` reference and the ``inferstack.io/pool`` label on its pods."""
    gpu: str
    """Required: the GPU model from the catalog (``H100``, ``H200``, ...): sizes the fit and the roofline."""
    gpus_per_node: int = Field(default=8, ge=1, le=16)
    nodes: int = Field(ge=1)
    """Required: how many servers the pool has. Fixed: replicas x GPUs per replica never exceed it."""
    host_memory_gib: int = Field(default=2048, ge=16)
    """RAM per server (an HGX H100/H200 server typically has 2 TiB)."""
    cpus: int | None = Field(default=None, ge=1)
    """Logical CPUs per server, as the kubelet counts them (``nproc``). Unset: a serving pod requests 8 per GPU; set:
    at most three quarters of its GPUs' share of them, as on the cloud, so a server with fewer cores still schedules."""
    node_selector: dict[LabelKey, LabelValue] = Field(min_length=1)
    """Required: labels that pick the pool's servers, e.g. ``nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3``
    (GPU Feature Discovery's product label) or an admin label."""
    local_volumes_per_node: int | None = Field(default=None, ge=1)
    """Local PVs the provisioner finds per server (one per mount under ``localStorage.hostDir``). Defaults to
    ``gpusPerNode``: one model-cache volume per GPU-sized replica."""

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        return catalog_member(value, GPUS, catalog_name="GPU", item="GPU model")

    @property
    def instance_type(self) -> str:
        """What messages call the node type (cloud pools name an instance type here)."""
        return f"{self.gpus_per_node}x {self.gpu} server"

    @property
    def spec(self) -> InstanceSpec:
        """The node as the serving layer's fit and roofline checks read it (no EFA: the fabric is InfiniBand)."""
        gpu: GpuSpec = GPUS[self.gpu]
        return InstanceSpec(
            self.instance_type, gpu, self.gpus_per_node, self.host_memory_gib, 0, 0, 0, 0, vcpus=self.cpus
        )

    @property
    def node_labels(self) -> dict[str, str]:
        return dict(self.node_selector)

    @property
    def volumes_per_node(self) -> int:
        return self.local_volumes_per_node or self.gpus_per_node

    @property
    def efa_enabled(self) -> bool:
        return False

    # The serving layer reads bounds the same way for every tier; a fixed fleet has min = max = nodes.
    @property
    def min_size(self) -> int:
        return self.nodes

    @property
    def max_size(self) -> int:
        return self.nodes


class GpuOperatorSpec(Spec):
    """NVIDIA GPU Operator (Helm chart ``gpu-operator``)."""

    driver: Literal["operator", "host"] = "operator"
    """``host``: the driver is pre-installed (DGX OS); the operator must not install another
    (NVIDIA/gpu-operator #130, #327: the driver daemonset crash-loops otherwise)."""
    toolkit: Literal["operator", "host"] = "operator"
    mig_strategy: Literal["none", "single", "mixed"] = "single"


class NetworkOperatorSpec(Spec):
    """NVIDIA Network Operator (Helm chart ``network-operator``) and its ``NicClusterPolicy``."""

    install: bool = True
    """Install the operator and its ``NicClusterPolicy``. ``false`` where the cluster already runs a Network Operator
    (a DGX cluster's, say): the kit then installs neither, and its RDMA pods request what that one's shared RDMA
    device plugin advertises, ``rdma/<fabric.rdmaResourceName>``. It then needs ``mofed: host`` and no
    ``fabric.secondaryNetwork`` (both are rendered into the policy the kit installs)."""
    mofed: Literal["operator", "host"] = "host"
    """``host``: MOFED/DOCA-OFED is on the servers; ``operator``: the policy deploys the DOCA driver container."""


def usable_addresses(subnet: str) -> int:
    """The addresses nv-ipam can hand out in ``subnet``: all but its network and broadcast addresses."""
    return IPv4Network(subnet, strict=False).num_addresses - 2


class SecondaryNetworkSpec(Spec):
    """A Multus secondary network for pod traffic over InfiniBand (IPoIB)."""

    kind: Literal["ipoib"] = "ipoib"
    """``ipoib`` only. A host-device network needs a ``HostDeviceNetwork``, the policy's ``sriovDevicePlugin`` and a
    ``nvidia.com/hostdev`` request in every rank (Mellanox/network-operator ``example/hostdevice-network-pod1.yml``),
    none of which the kit renders: the pods would get no ``net1``."""
    master: str | None = None
    """IPoIB parent interface on the hosts (e.g. ``ibs3f1``); required."""
    subnet: str = described(r"^\d+\.\d+\.\d+\.\d+/\d+$", allowed="an IPv4 CIDR: a.b.c.d/n", fix="e.g. 192.168.100.0/24")
    """Required: the IP pool's subnet (nv-ipam)."""
    gateway: str | None = None
    """An address inside ``subnet``; empty: none."""
    per_node_block_size: int = Field(default=64, ge=2)
    """Addresses nv-ipam gives each node: at most the subnet's usable addresses."""

    # nv-ipam's own IPPool rules (Mellanox/nvidia-k8s-ipam api/v1alpha1/ippool_validate.go). The policy runs nv-ipam
    # without its webhook, so a pool that breaks them is stored, nv-ipam ignores it, and every rank's CNI ADD fails.
    @field_validator("subnet")
    @classmethod
    def _a_network(cls, value: str) -> str:
        try:
            network = IPv4Network(value, strict=False)
        except ValueError:
            network = None
        if network is None or network.prefixlen > 30:
            raise config_error(
                "not an IPv4 network with room for two addresses",
                allowed="an IPv4 CIDR a.b.c.d/n: octets 0 to 255, n from 0 to 30",
                fix="e.g. 192.168.100.0/24",
            )
        return value

    @field_validator("gateway")
    @classmethod
    def _in_subnet(cls, value: str | None, info: ValidationInfo) -> str | None:
        subnet = info.data.get("subnet")
        if value is None or subnet is None:
            return value
        try:
            inside = IPv4Address(value) in IPv4Network(subnet, strict=False)
        except ValueError:
            inside = False
        if not inside:
            raise config_error(
                f"not an address in subnet {subnet}",
                allowed="an IPv4 address inside secondaryNetwork.subnet",
                fix=f"use an address of {subnet} (e.g. {next(IPv4Network(subnet, strict=False).hosts())}), or remove "
                "gateway",
            )
        return value

    @field_validator("per_node_block_size")
    @classmethod
    def _fits_the_subnet(cls, value: int, info: ValidationInfo) -> int:
        subnet = info.data.get("subnet")
        if subnet is None:
            return value
        usable = usable_addresses(subnet)
        if value > usable:
            raise config_error(
                f"more addresses per node than subnet {subnet} has ({usable})",
                allowed=f"at most {usable} (the subnet's addresses less its network and broadcast addresses)",
                fix=f"lower perNodeBlockSize to {usable} or less, or widen subnet",
            )
        return value


HcaName = Annotated[
    str,
    described(
        r"^[A-Za-z][A-Za-z0-9_.-]*(:[1-9][0-9]*)?$",
        allowed="an RDMA device name as ibv_devices lists it, optionally :<port>: a letter, then letters, digits, "
        "'_', '.' and '-' (NCCL_IB_HCA joins the names with ',', so a name holds no ',', '^', '=' or space)",
        fix="e.g. mlx5_0, or mlx5_0:1 for port 1",
    ),
]
"""One entry of ``NCCL_IB_HCA``'s list (NCCL "Environment Variables")."""
PciDeviceId = Annotated[
    str,
    described(
        r"^[0-9a-f]{4}$",
        allowed="a PCI device id: 4 lowercase hex digits, without the vendor (15b3:) or 0x",
        fix="e.g. 1021 for ConnectX-7 (lspci -nn -d 15b3: prints [15b3:<device id>])",
    ),
]
"""One entry of the RDMA plugin's ``deviceIDs`` selector, which compares the text exactly with the id as the PCI
library reads it (Mellanox/k8s-rdma-shared-dev-plugin ``pkg/resources/device_selectors.go``): ``101B`` or
``0x101b`` matches no device, and the plugin advertises none."""


class FabricSpec(Spec):
    """The GPU fabric between servers: how NCCL reaches the other nodes of a multi-node group."""

    kind: Literal["infiniband", "roce", "none"] = "infiniband"
    hcas: tuple[HcaName, ...] = ()
    """HCA names NCCL may use (``NCCL_IB_HCA``, exact match), e.g. ``[mlx5_0, ..., mlx5_7]``, each once; empty: NCCL
    picks."""
    socket_interface: str | None = None
    """NCCL's bootstrap interface (``NCCL_SOCKET_IFNAME``) as the serving pods see it: they are not on the host
    network, so ``eth0`` (the pod network) or, with ``secondaryNetwork``, ``net1`` (Multus's name for it), never a
    host interface such as ``bond0``; empty: NCCL picks."""
    topology_label: LabelKey = "fabric.topograph.run/tier-0"
    """Node label naming the leaf switch (or rail) a server hangs off: a multi-node group stays within one value
    (LeaderWorkerSet exclusive topology). Default: NVIDIA topograph v1's leaf label."""
    rdma_resource_name: str = described(
        r"^[a-zA-Z0-9_.-]{1,63}$",
        allowed="1 to 63 letters, digits, '_', '.' and '-'",
        fix="e.g. rdma_shared_device_a",
        default="rdma_shared_device_a",
    )
    """The RDMA shared device plugin's resource (requested as ``rdma/<name>``)."""
    rdma_hca_max: int = Field(default=63, ge=1)
    """Pods that may share one HCA through the shared plugin (it gives no isolation and no bandwidth split)."""
    device_ids: tuple[PciDeviceId, ...] = ()
    """PCI device ids the plugin's selector matches (e.g. ``101b`` for ConnectX-6), each once; empty: any Mellanox
    (15b3)."""
    secondary_network: SecondaryNetworkSpec | None = None
    """An IPoIB network the serving pods attach as ``net1``; with ``kind: infiniband`` only (IPoIB runs on InfiniBand
    ports)."""

    @field_validator("hcas", "device_ids")
    @classmethod
    def _each_once(cls, items: tuple[str, ...]) -> tuple[str, ...]:
        repeated = _repeated(items)
        if repeated:
            raise config_error(
                f"{repeated[0]!r} listed twice",
                allowed="distinct entries",
                fix=f"list {repeated[0]} once",
            )
        return items

    @property
    def rdma(self) -> bool:
        return self.kind != "none"


class LocalStorageSpec(Spec):
    """Local NVMe through sig-storage's local static provisioner: one PV per mount under ``hostDir``."""

    host_dir: str = described(r"^/", allowed="an absolute path", fix="e.g. /mnt/fast-disks", default="/mnt/fast-disks")
    storage_class: DnsLabel = "local-nvme"
    model_cache_gib: int = Field(default=800, ge=10)
    """The smallest local volume a serving pod accepts for its model cache."""


class OnpremModelStoreSpec(Spec):
    """Where weights live: an S3-compatible endpoint (MinIO, Ceph RGW; the tier-neutral ``S3CompatibleStoreSpec``)
    the model loader reads, or a pre-filled volume (NFS, CephFS) the pods copy checkpoints from."""

    kind: Literal["s3", "volume"] = "s3"
    endpoint: EndpointUrl | None = None
    """``s3``: the endpoint URL, e.g. ``https://minio.storage.example:9000``."""
    bucket: BucketName | None = None
    """``s3``: checkpoints under ``<model id>/hf``, engines under ``<model id>/trtllm/``."""
    region: str = "us-east-1"
    """``s3``: the signing region the endpoint expects (MinIO's default is us-east-1)."""
    claim_name: str | None = described(
        r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        allowed="a PersistentVolumeClaim name: lowercase letters, digits and '-', starting and ending with a letter "
        "or digit, at most 63 characters",
        fix="e.g. model-weights",
        default=None,
    )
    """``volume``: a ReadOnlyMany PersistentVolumeClaim in the serving namespace holding ``<model id>/hf/``
    checkpoints (vLLM models only: a Triton engine build uploads its engine to an S3 store)."""

    def s3(self) -> S3CompatibleStoreSpec:
        """The S3 store's section (``kind: s3``, after config validation checked endpoint and bucket)."""
        return S3CompatibleStoreSpec(endpoint=self.endpoint or "", bucket=self.bucket or "", region=self.region)


class MetalLbSpec(Spec):
    """MetalLB in L2 mode: the gateway's LoadBalancer Service gets an address from ``addresses``."""

    addresses: tuple[str, ...] = Field(min_length=1)
    """Required: CIDRs or ``a.b.c.d-a.b.c.e`` ranges on the servers' L2 segment."""

    @field_validator("addresses")
    @classmethod
    def _cidrs_or_ranges(cls, addresses: tuple[str, ...]) -> tuple[str, ...]:
        # MetalLB's IPAddressPool takes exactly these two forms; anything else deploys and the pool rejects it.
        for i, entry in enumerate(addresses):
            first, dash, last = entry.partition("-")
            try:
                if not dash:
                    IPv4Network(entry, strict=False)
                elif IPv4Address(first.strip()) > IPv4Address(last.strip()):
                    raise ValueError
            except ValueError:
                raise config_error(
                    f"item {i}, {entry!r}, is neither a CIDR nor an ascending a-b range",
                    allowed="IPv4 CIDRs (10.40.8.240/28) or ranges first-last with first <= last "
                    "(10.40.8.240-10.40.8.250)",
                    fix="write each entry as a CIDR or an ascending range",
                ) from None
        return addresses


class OnpremLoadBalancerSpec(Spec):
    """What gives the gateway's ``LoadBalancer`` Service its address."""

    kind: Literal["metallb", "existing"] = "existing"
    """``metallb``: the kit installs MetalLB with ``metallb``'s pool; ``existing``: the cluster has one."""
    metallb: MetalLbSpec | None = None
    load_balancer_class: LabelKey | None = None
    """``existing``: the ``spec.loadBalancerClass`` your load balancer serves (e.g. ``kube-vip.io/kube-vip-class``);
    left out: the cluster default (an empty string is no label key, and refused). The API server checks it as a
    label key is checked (``ValidateQualifiedName`` in kubernetes ``validateLoadBalancerClassField``)."""
    source_ranges: tuple[Cidr, ...] = (
        IPv4Network("10.0.0.0/8"),
        IPv4Network("172.16.0.0/12"),
        IPv4Network("192.168.0.0/16"),
    )
    """Networks the gateway's load balancer admits (``loadBalancerSourceRanges``), private ones only; private ranges
    by default."""

    @field_validator("source_ranges")
    @classmethod
    def _private_only(cls, ranges: tuple[IPv4Network, ...]) -> tuple[IPv4Network, ...]:
        # The gateway's on-prem load balancer is internal, with no internet-facing opt-in: the policy pack takes a
        # LoadBalancer Service for internal only when every source range is private (k8s-no-internet-facing-service).
        public = [str(n) for n in ranges if not n.is_private]
        if not ranges or public:
            raise config_error(
                f"{', '.join(public)} not private" if public else "no networks: every address would be admitted",
                allowed="one or more private IPv4 networks (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or inside them)",
                fix="list the private networks your clients are on, or remove sourceRanges for the private ranges",
            )
        return ranges
