"""The EFA network-interface layout rule and the EFA security group, shared by launch templates and Karpenter.

EC2 user guide, "Maximize network bandwidth on accelerated instances" / "EFA for
accelerated instance types": network card 0, device index 0 must be an ENA
interface (``interface``); ``efa-only`` is not allowed as the primary. Card 0 /
device 1 carries an ``efa-only`` interface, and every other EFA-capable card gets an
``efa-only`` interface at device 0. The legacy layout (every interface of type
``efa``) gives each one an IP address and exhausts subnets on 32-card instances.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import pulumi
import pulumi_aws as aws

from components.catalog.instances import InstanceSpec

InterfaceType = Literal["interface", "efa-only"]


class Interface(NamedTuple):
    network_card_index: int
    device_index: int
    interface_type: InterfaceType


def efa_interface_layout(spec: InstanceSpec) -> list[Interface]:
    """Interfaces for ``spec`` with EFA on: 1 ENA + one ``efa-only`` per EFA interface.

    p5.48xlarge: 1 + 32; p5en.48xlarge: 1 + 16. An instance without EFA gets no
    explicit layout (an empty list): EC2's default single ENA interface applies.
    """
    if not spec.efa:
        return []
    layout = [Interface(0, 0, "interface"), Interface(0, 1, "efa-only")]
    layout += [Interface(card, 0, "efa-only") for card in range(1, spec.efa_interfaces)]
    return layout


def efa_security_group(
    name: str, *, pool: str, vpc_id: pulumi.Input[str], tags: dict[str, str], opts: pulumi.ResourceOptions
) -> aws.ec2.SecurityGroup:
    """The security group every EFA node of ``pool`` carries: all traffic from and to itself.

    EC2 user guide, "Prepare an EFA-enabled security group": both directions must name the group itself.
    EFA's SRD traffic carries no IP address, so an egress rule to ``0.0.0.0/0`` does not cover it (the EKS
    cluster security group has only that): NCCL then fails with "Unresponsive receiver" (awslabs/
    awsome-distributed-ai #546). The ``0.0.0.0/0`` egress keeps the node's ordinary outbound traffic.
    """
    every: dict[str, Any] = {"protocol": "-1", "from_port": 0, "to_port": 0}
    return aws.ec2.SecurityGroup(
        name,
        vpc_id=vpc_id,
        description=f"EFA traffic between {pool} nodes",
        ingress=[aws.ec2.SecurityGroupIngressArgs(**every, self=True)],
        egress=[
            aws.ec2.SecurityGroupEgressArgs(**every, self=True),
            aws.ec2.SecurityGroupEgressArgs(**every, cidr_blocks=["0.0.0.0/0"]),
        ],
        tags={**tags, "Name": name},
        opts=opts,
    )
