"""LocalStorage: local NVMe as PersistentVolumes through sig-storage's local static provisioner.

Each mount under ``hostDir`` on a node becomes one PV (one mount = one PV), offered through a
``kubernetes.io/no-provisioner`` StorageClass with ``WaitForFirstConsumer``, so a claim binds on the node its
pod is scheduled to (the chart's helm/provisioner/templates/storageclass.yaml). The kit's serving pods take one
volume each for their model cache. Prepare the servers first: RAID0 the NVMe drives, mount the array, and
bind-mount one directory per volume under ``hostDir`` (README, "On-prem quick start").
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.kube.helm import release
from components.onprem.specs import LocalStorageSpec
from components.specs import Args

NO_PROVISIONER = "kubernetes.io/no-provisioner"


def provisioner_values(spec: LocalStorageSpec) -> dict[str, Any]:
    """One class whose PVs are the directories mounted under ``hostDir``; released volumes are wiped, not kept."""
    return {
        "classes": [
            {
                "name": spec.storage_class,
                "hostDir": spec.host_dir,
                "volumeMode": "Filesystem",
                "fsType": "ext4",
                # The chart then renders the StorageClass itself (no-provisioner, WaitForFirstConsumer).
                "storageClass": {"reclaimPolicy": "Delete", "isDefaultClass": False},
            }
        ],
        # The discovery daemon runs on GPU servers, which carry the GPU taint where admins set one.
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }


class LocalStorageArgs(Args):
    spec: LocalStorageSpec
    provider: k8s.Provider


class LocalStorage(pulumi.ComponentResource):
    storage_class: str

    def __init__(self, name: str, args: LocalStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:local_storage:LocalStorage", name, None, opts)
        release("local-static-provisioner", provisioner_values(args.spec), parent=self, provider=args.provider)
        self.storage_class = args.spec.storage_class
        self.register_outputs({"storage_class": self.storage_class})
