"""The one catalog of GPU and instance facts.

Everything that depends on what a GPU or an instance type *is* reads it from here:
the EFA interface layout, node labels, config validation, model-fit checks and the
decode roofline. Nothing else in the kit repeats these numbers.

Sources:
- Instance rows: EC2 ``DescribeInstanceTypes`` (``GpuInfo``, ``NetworkInfo.EfaInfo``,
  ``NetworkInfo.MaximumNetworkCards``, ``InstanceStorageInfo``), the same data moto
  carries; ``tests/test_catalog.py`` cross-checks every row against moto.
- GPU rows: NVIDIA data sheets (HBM bandwidth, dense BF16/FP8 tensor throughput).
- System rows (``SYSTEM_INSTANCES``): the same EC2 data, cross-checked the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from types import MappingProxyType


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model, as the roofline and the fit checks need it."""

    model: str
    """Short name used in labels, e.g. ``H100``."""
    memory_mib: int
    """HBM per GPU exactly as EC2 reports it (``GpuInfo.Gpus[].MemoryInfo.SizeInMiB``)."""
    hbm_tb_s: float
    """Peak HBM bandwidth in TB/s: the decode roofline's denominator."""
    bf16_tflops: float
    """Dense BF16 tensor throughput."""
    fp8_tflops: float | None
    """Dense FP8 tensor throughput; ``None`` where the GPU has no FP8 tensor cores."""
    nvlink_gb_s: float | None
    """NVLink bandwidth per GPU in GB/s; ``None`` for PCIe-only parts."""

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def memory_gb(self) -> float:
        """Decimal gigabytes, the unit model sizes and the roofline examples use."""
        return self.memory_mib * 1024 * 1024 / 1e9


@dataclass(frozen=True)
class InstanceSpec:
    """One EC2 instance type that can host a GPU pool."""

    instance_type: str
    gpu: GpuSpec
    gpu_count: int
    host_memory_gib: int
    efa_interfaces: int
    """``NetworkInfo.EfaInfo.MaximumEfaInterfaces``; 0 means no EFA.

    Read from ``EfaInfo``, never from ``MaximumNetworkCards``: eksctl shipped that bug.
    """
    network_cards: int
    nvme_disks: int
    nvme_disk_gb: int
    vcpus: int | None = None
    """``VCpuInfo.DefaultVCpus``: bounds what pods on one node may request. ``None`` where the kit does not know
    it (an on-prem server described by its GPUs)."""

    @property
    def family(self) -> str:
        return self.instance_type.split(".", 1)[0]

    @property
    def efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def gpu_memory_gib(self) -> float:
        return self.gpu.memory_gib * self.gpu_count

    @property
    def nvme_total_gb(self) -> int:
        return self.nvme_disks * self.nvme_disk_gb


H100 = GpuSpec("H100", memory_mib=81920, hbm_tb_s=3.35, bf16_tflops=989, fp8_tflops=1979, nvlink_gb_s=900)
H200 = GpuSpec("H200", memory_mib=144384, hbm_tb_s=4.8, bf16_tflops=989, fp8_tflops=1979, nvlink_gb_s=900)
A100_40 = GpuSpec("A100", memory_mib=40960, hbm_tb_s=1.555, bf16_tflops=312, fp8_tflops=None, nvlink_gb_s=600)
B200 = GpuSpec("B200", memory_mib=183359, hbm_tb_s=8.0, bf16_tflops=2250, fp8_tflops=4500, nvlink_gb_s=1800)
L40S = GpuSpec("L40S", memory_mib=45776, hbm_tb_s=0.864, bf16_tflops=362, fp8_tflops=733, nvlink_gb_s=None)
A10G = GpuSpec("A10G", memory_mib=22888, hbm_tb_s=0.6, bf16_tflops=125, fp8_tflops=None, nvlink_gb_s=None)

# Small inference GPUs people put at the edge (no EC2 row: on the edge tier a node names its GPU directly).
# All three are Ada Lovelace (SM 8.9) with 4th-generation tensor cores, so FP8 runs (NVIDIA "Ada Lovelace
# architecture" whitepaper). Tensor figures are the data sheets' peaks with sparsity, halved to dense.
# - L4: 24 GB GDDR6, 300 GB/s, BF16 242 / FP8 485 TFLOPS sparse (NVIDIA L4 Tensor Core GPU data sheet);
#   memory as EC2 reports it for g6 (L4) instances.
L4 = GpuSpec("L4", memory_mib=22888, hbm_tb_s=0.3, bf16_tflops=121, fp8_tflops=242, nvlink_gb_s=None)
# - RTX 4000 Ada Generation: 20 GB GDDR6 ECC, 360 GB/s, 327.6 TFLOPS FP8 sparse (NVIDIA RTX 4000 Ada data sheet).
RTX4000_ADA = GpuSpec("RTX4000Ada", memory_mib=20480, hbm_tb_s=0.36, bf16_tflops=82, fp8_tflops=164, nvlink_gb_s=None)
# - RTX 6000 Ada Generation: 48 GB GDDR6 ECC, 960 GB/s, 1,457 TFLOPS FP8 sparse (NVIDIA RTX 6000 Ada data sheet).
RTX6000_ADA = GpuSpec("RTX6000Ada", memory_mib=49152, hbm_tb_s=0.96, bf16_tflops=364, fp8_tflops=728, nvlink_gb_s=None)

GPUS: Mapping[str, GpuSpec] = MappingProxyType(
    {g.model: g for g in (H100, H200, A100_40, B200, L40S, A10G, L4, RTX4000_ADA, RTX6000_ADA)}
)
EDGE_GPUS: tuple[str, ...] = (L4.model, RTX4000_ADA.model, RTX6000_ADA.model)
"""The GPUs an edge node may name: small, single-slot or workstation parts. Data-centre parts (H100, ...) are
the cloud and on-prem tiers' (a site with one would be an on-prem stack)."""


INSTANCES: Mapping[str, InstanceSpec] = MappingProxyType(
    {
        i.instance_type: i
        for i in (
            # instance type, GPU, GPUs, host memory GiB, EFA interfaces, network cards, NVMe disks, GB each, vCPUs
            InstanceSpec("p5.48xlarge", H100, 8, 2048, 32, 32, 8, 3800, 192),
            InstanceSpec("p5e.48xlarge", H200, 8, 2048, 32, 32, 8, 3800, 192),
            InstanceSpec("p5en.48xlarge", H200, 8, 2048, 16, 16, 8, 3800, 192),
            InstanceSpec("p4d.24xlarge", A100_40, 8, 1152, 4, 4, 8, 1000, 96),
            InstanceSpec("p6-b200.48xlarge", B200, 8, 2048, 8, 8, 8, 3800, 192),
            InstanceSpec("g6e.xlarge", L40S, 1, 32, 0, 1, 1, 250, 4),
            InstanceSpec("g5.xlarge", A10G, 1, 16, 0, 1, 1, 250, 4),
        )
    }
)


def instance(instance_type: str) -> InstanceSpec:
    """The catalog row for ``instance_type``; ``KeyError`` names the known types."""
    try:
        return INSTANCES[instance_type]
    except KeyError:
        raise KeyError(f"unknown GPU instance type {instance_type!r}; known: {', '.join(INSTANCES)}") from None


@dataclass(frozen=True)
class SystemInstanceSpec:
    """One EC2 instance type the system pool may run: x86_64, no GPU (its nodes boot ``AL2023_x86_64_STANDARD``)."""

    instance_type: str
    vcpus: int
    memory_gib: int
    network_interfaces: int
    ipv4_per_interface: int

    @property
    def max_pods(self) -> int:
        """The VPC CNI's pod limit, as the EKS AMI sets ``maxPods``: the first address of each interface is the
        node's, and two host-network pods (aws-node, kube-proxy) take none (amazon-eks-ami ``eni-max-pods.txt``)."""
        return self.network_interfaces * (self.ipv4_per_interface - 1) + 2

    @property
    def allocatable_memory_mib(self) -> int:
        """Memory pods may request: the instance's, less the AMI's kubelet reserve (``11 MiB x maxPods + 255 MiB``)
        and its hard-eviction threshold (100 MiB) (amazon-eks-ami ``nodeadm/internal/kubelet/config.go``). The
        kernel keeps a little more, so a pod sized to the last MiB may still not fit."""
        return self.memory_gib * 1024 - (11 * self.max_pods + 255) - 100

    @property
    def allocatable_cpu_m(self) -> int:
        """CPU pods may request, in millicores: the instance's, less the AMI's kubelet reserve of 6 % of the first
        core, 1 % of the second, 0.5 % of the third and fourth and 0.25 % of the rest (amazon-eks-ami
        ``nodeadm/internal/kubelet/config.go``, ``getCPUMillicoresToReserve``: ranges 0/1000/2000/4000 m at
        600/100/50/25 per 10,000). No system reserve and no CPU eviction threshold."""
        total = self.vcpus * 1000
        bounds = (0, 1000, 2000, 4000, total)
        reserved = sum(
            (min(total, end) - start) * per_10k // 10_000
            for (start, end), per_10k in zip(pairwise(bounds), (600, 100, 50, 25), strict=True)
            if total > start
        )
        return total - reserved


SYSTEM_FAMILIES: Mapping[str, int] = MappingProxyType(
    {
        **dict.fromkeys(("m5", "m6i", "m6a", "m7i", "m7i-flex", "m7a"), 4),
        **dict.fromkeys(("c6i", "c6a", "c7i", "c7a"), 2),
        **dict.fromkeys(("r5", "r6i", "r6a", "r7i", "r7a"), 8),
    }
)
"""x86_64 general-purpose (m), compute (c) and memory (r) families of the 5th to 7th generation → GiB per vCPU. They
share one size ladder (``_SYSTEM_SIZES``); the 8th generation (m8i, ...) has more addresses per interface."""
_SYSTEM_SIZES: Mapping[str, tuple[int, int, int]] = MappingProxyType(
    {
        # size: (vCPUs, network interfaces, IPv4 addresses per interface)
        "large": (2, 3, 10),
        "xlarge": (4, 4, 15),
        "2xlarge": (8, 4, 15),
        "4xlarge": (16, 8, 30),
        "8xlarge": (32, 8, 30),
        "12xlarge": (48, 8, 30),
        "16xlarge": (64, 15, 50),
    }
)
SYSTEM_INSTANCES: Mapping[str, SystemInstanceSpec] = MappingProxyType(
    {
        f"{family}.{size}": SystemInstanceSpec(f"{family}.{size}", vcpus, vcpus * gib_per_vcpu, enis, ips)
        for family, gib_per_vcpu in SYSTEM_FAMILIES.items()
        for size, (vcpus, enis, ips) in _SYSTEM_SIZES.items()
    }
)
"""The system pool's instance types: every family of ``SYSTEM_FAMILIES`` in every size of ``_SYSTEM_SIZES``."""
