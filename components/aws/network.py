"""Network: the VPC the cluster and its GPU pools live in.

Private subnets (one per zone) carry every node and pod; public subnets exist only
for NAT gateways and internet-facing load balancers. S3 traffic (model weights,
engines) goes through a gateway endpoint, so it never pays NAT processing charges
or NAT bandwidth limits.
"""

from __future__ import annotations

from ipaddress import IPv4Network

import pulumi
import pulumi_aws as aws
from pydantic import Field

from components.specs import Args, NetworkSpec


class NetworkArgs(Args):
    spec: NetworkSpec
    """Required: the CIDR and zones come from the environment config."""
    region: str
    """Required: the S3 gateway endpoint's service name is regional."""
    cluster_name: str
    """Required: subnets are tagged for Karpenter discovery and the EKS load-balancer controller."""
    tags: dict[str, str] = Field(default_factory=dict)


def subnet_cidrs(cidr: IPv4Network, zones: int) -> tuple[list[IPv4Network], list[IPv4Network]]:
    """Split the VPC: each zone gets a private /(n+2) and a public /(n+6).

    With a /16 and three zones: private /18s (16k addresses each, for pods with the VPC CNI)
    and public /22s carved from the fourth quarter.
    """
    quarters = list(cidr.subnets(prefixlen_diff=2))
    if zones > 3:
        raise ValueError("at most three zones are supported by this layout")
    private = quarters[:zones]
    public = list(quarters[3].subnets(prefixlen_diff=4))[:zones]
    return private, public


class Network(pulumi.ComponentResource):
    """A VPC over at least two zones: private node subnets, public NAT/LB subnets, S3 endpoint."""

    vpc_id: pulumi.Output[str]
    private_subnet_ids: dict[str, pulumi.Output[str]]
    """Zone → private subnet id."""
    public_subnet_ids: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws_network:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spec = args.spec
        zones = list(spec.availability_zones)
        private_cidrs, public_cidrs = subnet_cidrs(spec.cidr, len(zones))
        tags = {**args.tags, f"kubernetes.io/cluster/{args.cluster_name}": "shared"}

        vpc = aws.ec2.Vpc(
            name,
            cidr_block=str(spec.cidr),
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": name},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(name, vpc_id=vpc.id, tags={**tags, "Name": name}, opts=child)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags={**tags, "Name": f"{name}-public"},
            opts=child,
        )

        self.public_subnet_ids = {}
        self.private_subnet_ids = {}
        nat_ids: dict[str, pulumi.Output[str]] = {}
        private_route_tables = []
        for zone, private_cidr, public_cidr in zip(zones, private_cidrs, public_cidrs, strict=True):
            public = aws.ec2.Subnet(
                f"{name}-public-{zone}",
                vpc_id=vpc.id,
                cidr_block=str(public_cidr),
                availability_zone=zone,
                # No public IPs on launch: only NAT gateways and load balancers live here.
                map_public_ip_on_launch=False,
                tags={**tags, "Name": f"{name}-public-{zone}", "kubernetes.io/role/elb": "1"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{zone}", subnet_id=public.id, route_table_id=public_rt.id, opts=child
            )
            self.public_subnet_ids[zone] = public.id
            if spec.nat_gateways == "per-zone" or not nat_ids:
                eip = aws.ec2.Eip(
                    f"{name}-nat-{zone}", domain="vpc", tags={**tags, "Name": f"{name}-nat-{zone}"}, opts=child
                )
                nat = aws.ec2.NatGateway(
                    f"{name}-{zone}",
                    allocation_id=eip.id,
                    subnet_id=public.id,
                    tags={**tags, "Name": f"{name}-{zone}"},
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
                )
                nat_ids[zone] = nat.id
            nat_id = nat_ids.get(zone) or next(iter(nat_ids.values()))

            private = aws.ec2.Subnet(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                cidr_block=str(private_cidr),
                availability_zone=zone,
                tags={
                    **tags,
                    "Name": f"{name}-private-{zone}",
                    "kubernetes.io/role/internal-elb": "1",
                    "karpenter.sh/discovery": args.cluster_name,
                },
                opts=child,
            )
            rt = aws.ec2.RouteTable(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat_id)],
                tags={**tags, "Name": f"{name}-private-{zone}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{zone}", subnet_id=private.id, route_table_id=rt.id, opts=child
            )
            private_route_tables.append(rt.id)
            self.private_subnet_ids[zone] = private.id

        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=private_route_tables,
            tags={**tags, "Name": f"{name}-s3"},
            opts=child,
        )

        self.vpc_id = vpc.id
        self.vpc_cidr = str(spec.cidr)
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "private_subnet_ids": self.private_subnet_ids,
                "public_subnet_ids": self.public_subnet_ids,
            }
        )
