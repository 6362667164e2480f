"""Launch-template pieces every node group shares: IMDSv2, the encrypted gp3 root, user data."""

from __future__ import annotations

import base64
from email.encoders import encode_noop
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from typing import Any

import yaml

NODECONFIG_API_VERSION = "node.eks.aws/v1alpha1"
MIME_BOUNDARY = "==INFERSTACK=="
"""Fixed so the rendered user data is a pure function of config (golden files, no launch-template churn)."""


def node_config(*, raid0: bool) -> dict[str, Any]:
    """The nodeadm ``NodeConfig`` EKS merges into the AL2023 bootstrap.

    ``localStorage.strategy: RAID0`` makes nodeadm stripe every instance-store NVMe disk
    into one array, mount it at ``/mnt/k8s-disks/0`` and bind-mount containerd, the kubelet
    and pod logs onto it (awslabs/amazon-eks-ami, nodeadm ``LocalStorageOptions``). Images and
    model caches then live on NVMe instead of the root EBS volume.
    """
    spec: dict[str, Any] = {}
    if raid0:
        spec["instance"] = {"localStorage": {"strategy": "RAID0"}}
    return {"apiVersion": NODECONFIG_API_VERSION, "kind": "NodeConfig", "spec": spec}


def render_user_data(*, raid0: bool) -> str:
    """MIME multi-part user data carrying the NodeConfig (the format EKS managed node groups merge)."""
    message = MIMEMultipart("mixed", boundary=MIME_BOUNDARY)
    body = "---\n" + yaml.safe_dump(node_config(raid0=raid0), sort_keys=False)
    part = MIMEApplication(body, "node.eks.aws", _encoder=encode_noop)
    del part["MIME-Version"]
    message.attach(part)
    return message.as_string() + "\n"


def encode_user_data(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def metadata_options() -> dict[str, Any]:
    """IMDSv2 only. Hop limit 1: pods get AWS credentials from Pod Identity, never from the node's IMDS."""
    return {
        "http_endpoint": "enabled",
        "http_tokens": "required",
        "http_put_response_hop_limit": 1,
        "instance_metadata_tags": "disabled",
    }


def root_volume(size_gib: int) -> dict[str, Any]:
    """Encrypted gp3 root volume at /dev/xvda (AL2023's root device)."""
    return {
        "device_name": "/dev/xvda",
        "ebs": {
            "volume_size": size_gib,
            "volume_type": "gp3",
            "iops": 3000,
            # Above gp3's 125 MB/s baseline: nodes without instance store pull multi-GB images onto root.
            "throughput": 250,
            "encrypted": "true",
            "delete_on_termination": "true",
        },
    }
