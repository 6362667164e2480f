"""Deterministic answers for Pulumi's mock engine: what ``inferstack plan`` and the tests run against.

Every resource gets a stable id derived from its URN, plus the outputs that cross-references
need (ARNs, endpoints, names). Every invoke the program makes is answered here; an invoke
this module does not know is an error, so a new data source cannot silently plan as ``None``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import pulumi
from google.protobuf import json_format
from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs

ACCOUNT_ID = "123456789012"
"""AWS's documentation account id: obviously not real, so a plan can never be mistaken for one."""
MOCK_AMI_RELEASE = "1.33.0-20251101"

STACK_REFERENCE = "pulumi:pulumi:StackReference"
ROOT_STACK = "pulumi:pulumi:Stack"
PLACEHOLDER_HOST = "inferstack-plan-placeholder.invalid"
"""Host of every URL a stack reference or a load balancer's address resolves to offline: ``.invalid`` can never
resolve (RFC 6761)."""


def stack_reference_outputs(stack: str) -> tuple[dict[str, Any], list[str]]:
    """Clearly marked offline stand-ins for a hub stack's outputs, and which of them are secret.

    Under ``inferstack plan`` there is no backend to read another stack from, so the reference resolves to these
    (the mock engine sees type ``pulumi:pulumi:StackReference`` with state ``{"outputs": {...}}``, as in
    pulumi/pulumi's stackReference tests).
    """
    return (
        {
            "gateway_url": f"https://{PLACEHOLDER_HOST}/{stack}/v1",
            "burst_api_key": f"<inferstack plan: placeholder for {stack} burst_api_key>",
        },
        ["burst_api_key"],
    )


_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
_SIG_KEY = "4dabf18193072939515e22adb298388d"


def _digest(text: str, length: int = 17) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


RANDOM_PASSWORD = "random:index/randomPassword:RandomPassword"


def generated_password(name: str) -> str:
    """The ``result`` a RandomPassword named ``name`` gets offline: deterministic and obviously not a credential.

    Applies on it run with this value (the gateway hashes the burst key into its keys file); the plan shows it only
    as ``[secret]``."""
    return f"plan-{_digest(f'{RANDOM_PASSWORD}::{name}')}"


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    parent: str | None
    custom: bool
    protect: bool
    inputs: dict[str, Any]
    """Wire-format (camelCase) inputs, secrets masked as ``[secret]``, resource references as URNs."""
    ignore_changes: tuple[str, ...] = ()
    """Input paths ``pulumi up`` leaves as they are live (the ``ignore_changes`` resource option)."""
    provider: str = ""
    """URN of the resource's explicit provider (its cluster, for a Kubernetes object); empty for the default one."""
    aliases: tuple[str, ...] = ()
    """The names the resource was known by before (the ``aliases`` resource option): ``pulumi up`` carries a resource
    of such a name in the state over to this one instead of deleting it and creating this."""


def parent_urn(parent: str) -> str | None:
    """A registration's parent as the plan records it: ``None`` for the root ``pulumi:pulumi:Stack``, which the
    engine makes the parent of every top-level resource but which is not itself in the plan's resources (README,
    plan JSON: "``null`` for top-level components")."""
    if not parent or parent.split("::")[2] == ROOT_STACK:
        return None
    return parent


def provider_urn(ref: str) -> str:
    """A provider reference ``<urn>::<id>`` as its URN (the id is unknown until the provider is created)."""
    return ref.rsplit("::", 1)[0] if ref else ""


def mark_secret(state: Any, names: Any) -> None:
    """Mark the named top-level properties of a resource's returned state (a protobuf Struct) secret, in place.

    The engine does this for the outputs a resource names in ``additionalSecretOutputs`` (the resource option,
    which pulumi_random sets for RandomPassword's ``result`` and ``bcryptHash``, pulumi_kubernetes for a Secret's
    ``data``); the SDK's ``MockMonitor`` returns the state as the mocks built it. Without it a generated password
    came back plain, and everything built from it planned in the clear."""
    for name in names:
        if name in state.fields and not _is_secret(state.fields[name]):
            value = json_format.MessageToDict(state.fields[name])
            state.fields[name].struct_value.Clear()
            state.fields[name].struct_value.update({_SIG_KEY: _SECRET_SIG, "value": value})


def _is_secret(value: Any) -> bool:
    fields = value.struct_value.fields if value.WhichOneof("kind") == "struct_value" else {}
    return _SIG_KEY in fields and fields[_SIG_KEY].string_value == _SECRET_SIG


def wire(value: Any) -> Any:
    """Normalize a deserialized-to-JSON protobuf value for the plan: mask secrets, refs → URNs, ints."""
    if isinstance(value, dict):
        sig = value.get(_SIG_KEY)
        if sig == _SECRET_SIG:
            return "[secret]"
        if sig == _RESOURCE_SIG:
            return value.get("urn")
        return {k: wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [wire(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class RecordingMonitor(MockMonitor):
    """A mock monitor that also records each registration with its parent and wire-format inputs."""

    def __init__(self, mocks: PlanMocks) -> None:
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        self._lock = threading.Lock()
        self._thread_loops: list[asyncio.AbstractEventLoop] = []

    def _own_thread_loop(self) -> None:
        """Give this executor thread an event loop we can close later.

        The mock monitor runs in executor threads and opens a loop in each one it needs
        (``_ensure_event_loop``) without ever closing it; creating it here lets ``close``
        end them, instead of leaking one per thread.
        """
        try:
            asyncio.get_event_loop()
        except RuntimeError:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            with self._lock:
                self._thread_loops.append(loop)

    def close(self) -> None:
        for loop in self._thread_loops:
            loop.close()
        self._thread_loops.clear()

    def Invoke(self, request: Any) -> Any:
        self._own_thread_loop()
        return super().Invoke(request)

    def ReadResource(self, request: Any) -> Any:
        """Reads (stack references, ``get`` functions) are recorded like registrations, with their inputs."""
        self._own_thread_loop()
        response = super().ReadResource(request)
        mark_secret(response.properties, request.additionalSecretOutputs)
        inputs = wire(json_format.MessageToDict(request.properties)) if request.properties else {}
        with self._lock:
            self.registrations.append(
                Registration(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    parent=parent_urn(request.parent),
                    custom=True,
                    protect=False,
                    inputs=inputs,
                    provider=provider_urn(request.provider),
                )
            )
        return response

    def RegisterResource(self, request: Any) -> Any:
        self._own_thread_loop()
        response = super().RegisterResource(request)
        mark_secret(response.object, request.additionalSecretOutputs)
        if request.type != ROOT_STACK:
            inputs = wire(json_format.MessageToDict(request.object)) if request.object else {}
            with self._lock:
                self.registrations.append(
                    Registration(
                        urn=response.urn,
                        type=request.type,
                        name=request.name,
                        parent=parent_urn(request.parent),
                        custom=bool(request.custom),
                        protect=bool(request.protect),
                        inputs=inputs,
                        ignore_changes=tuple(request.ignoreChanges),
                        provider=provider_urn(request.provider),
                        aliases=tuple(a.spec.name for a in request.aliases if a.WhichOneof("alias") == "spec"),
                    )
                )
        return response


@dataclass
class PlanMocks(pulumi.runtime.Mocks):
    region: str = "us-east-1"
    invokes: list[str] = field(default_factory=list)

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        token = args.typ
        if token == STACK_REFERENCE:
            # A read (the SDK reads a stack reference by id), so it arrives without ``custom``.
            stack = args.inputs.get("name") or args.resource_id or args.name
            outputs, secret = stack_reference_outputs(stack)
            return stack, {"name": stack, "outputs": outputs, "secretOutputNames": secret}
        if not args.custom:
            return None, {}
        name = args.name
        digest = _digest(f"{token}::{name}")
        state: dict[str, Any] = dict(args.inputs)
        service = token.split(":")[1].split("/")[0] if token.startswith("aws:") else ""
        arn = f"arn:aws:{service}:{self.region}:{ACCOUNT_ID}:{name}"
        rid = f"{name}-{digest[:8]}"

        if token == "aws:ec2/vpc:Vpc":
            rid = f"vpc-{digest}"
        elif token == "aws:ec2/subnet:Subnet":
            rid = f"subnet-{digest}"
        elif token == "aws:ec2/securityGroup:SecurityGroup":
            rid = f"sg-{digest}"
        elif token == "aws:ec2/launchTemplate:LaunchTemplate":
            rid = f"lt-{digest}"
            state["latestVersion"] = 1
        elif token == "aws:ec2/placementGroup:PlacementGroup":
            state["name"] = args.inputs.get("name") or f"{name}-{digest[:7]}"
        elif token in ("aws:iam/role:Role", "aws:iam/policy:Policy"):
            kind = token.rsplit(":", 1)[1].lower()
            state["name"] = args.inputs.get("name") or f"{name}-{digest[:7]}"
            arn = f"arn:aws:iam::{ACCOUNT_ID}:{kind}/{state['name']}"
        elif token == "aws:kms/key:Key":
            rid = f"{digest[:8]}-{digest[8:12]}-4{digest[12:15]}-8{digest[:3]}-{digest[3:15]}"
            arn = f"arn:aws:kms:{self.region}:{ACCOUNT_ID}:key/{rid}"
        elif token == "aws:eks/cluster:Cluster":
            state["endpoint"] = f"https://{digest.upper()[:16]}.gr7.{self.region}.eks.amazonaws.com"
            state["certificateAuthority"] = {"data": base64.b64encode(b"mock-ca-" + digest.encode()).decode()}
            state["vpcConfig"] = {**args.inputs.get("vpcConfig", {}), "clusterSecurityGroupId": f"sg-{digest}"}
            arn = f"arn:aws:eks:{self.region}:{ACCOUNT_ID}:cluster/{args.inputs.get('name', name)}"
            rid = args.inputs.get("name", name)
        elif token == "aws:eks/nodeGroup:NodeGroup":
            state["nodeGroupName"] = args.inputs.get("nodeGroupName") or f"{name}-{digest[:7]}"
        elif token == "aws:eks/accessEntry:AccessEntry":
            state["principalArn"] = args.inputs.get("principalArn")
        elif token == "aws:s3/bucket:Bucket":
            bucket = args.inputs.get("bucket") or f"{name}-{digest[:7]}"
            state["bucket"] = bucket
            arn = f"arn:aws:s3:::{bucket}"
            rid = bucket
        elif token == "aws:ecr/repository:Repository":
            repo = args.inputs.get("name", name)
            state["repositoryUrl"] = f"{ACCOUNT_ID}.dkr.ecr.{self.region}.amazonaws.com/{repo}"
            arn = f"arn:aws:ecr:{self.region}:{ACCOUNT_ID}:repository/{repo}"
        elif token == "aws:elasticache/replicationGroup:ReplicationGroup":
            state["primaryEndpointAddress"] = f"master.{name}.{digest[:6]}.use1.cache.amazonaws.com"
            state["configurationEndpointAddress"] = f"clustercfg.{name}.{digest[:6]}.use1.cache.amazonaws.com"
        elif token == RANDOM_PASSWORD:
            # Secret as the engine makes it (RandomPassword declares additionalSecretOutputs: RecordingMonitor).
            state["result"] = generated_password(name)
            state["bcryptHash"] = f"plan-hash-{digest}"
        elif token == "kubernetes:core/v1:Service" and (args.inputs.get("spec") or {}).get("type") == "LoadBalancer":
            # The address the load balancer gets once created (pulumi-kubernetes waits for status.loadBalancer.ingress
            # before it counts the Service ready): a marked stand-in, so a hub's gateway_url plans on its listener.
            namespace = (args.inputs.get("metadata") or {}).get("namespace", "default")
            state["status"] = {"loadBalancer": {"ingress": [{"hostname": f"{name}.{namespace}.{PLACEHOLDER_HOST}"}]}}
        elif (
            token == "aws:elasticache/subnetGroup:SubnetGroup"
            or token == "aws:elasticache/parameterGroup:ParameterGroup"
        ):
            state["name"] = args.inputs.get("name") or f"{name}-{digest[:7]}"
        if not token.startswith("aws:"):
            state.setdefault("id", rid)
            return rid, state
        state.setdefault("arn", arn)
        state.setdefault("id", rid)
        return rid, state

    def call(self, args: MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        self.invokes.append(args.token)
        token = args.token
        if token == "aws:ssm/getParameter:getParameter":
            # The EKS-optimized AMI parameters: the plan shows a fixed, recognisable release.
            return {"name": args.args["name"], "value": MOCK_AMI_RELEASE, "type": "String"}, []
        if token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT_ID, "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/plan", "userId": "PLAN"}, []
        if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return {"names": [f"{self.region}{z}" for z in "abc"], "zoneIds": [f"use1-az{i}" for i in (1, 2, 4)]}, []
        if token == "aws:index/getRegion:getRegion":
            return {"name": self.region, "region": self.region}, []
        if token == "aws:iam/getPolicyDocument:getPolicyDocument":
            return {"json": json.dumps(_policy_document(args.args), sort_keys=True)}, []
        raise NotImplementedError(
            f"inferstack plan has no mock for the invoke {token!r}; add it to inferstack_cli/mocks.py"
        )


def _policy_document(args: dict[str, Any]) -> dict[str, Any]:
    """Render ``getPolicyDocument`` statements as the IAM JSON AWS would return."""
    statements = []
    for st in args.get("statements") or []:
        out: dict[str, Any] = {"Effect": st.get("effect", "Allow")}
        if st.get("sid"):
            out["Sid"] = st["sid"]
        if st.get("actions"):
            out["Action"] = st["actions"]
        if st.get("resources"):
            out["Resource"] = st["resources"]
        for p in st.get("principals") or []:
            out.setdefault("Principal", {})[p["type"]] = p["identifiers"]
        for c in st.get("conditions") or []:
            out.setdefault("Condition", {}).setdefault(c["test"], {})[c["variable"]] = c["values"]
        statements.append(out)
    return {"Version": "2012-10-17", "Statement": statements}
