"""The inferstack policy pack's rules, importable without starting a policy server.

``policies/__main__.py`` wraps ``POLICIES`` in one ``PolicyPack(...)`` for
``pulumi preview --policy-pack policies``; ``inferstack plan`` and the tests call each
rule's ``validate`` directly on the mock-captured (camelCase, wire-format) inputs.
Every rule here enforces a line of the security baseline in the README.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy
from pulumi_policy.policy import PolicyCustomTimeouts, PolicyResourceOptions

Validate = Callable[[ResourceValidationArgs, ReportViolation], None]
MANDATORY = EnforcementLevel.MANDATORY


def _for(resource_type: str, check: Callable[[dict[str, Any], ReportViolation], None]) -> Validate:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        if args.resource_type == resource_type:
            check(dict(args.props), report)

    return validate


def _imdsv2(props: dict[str, Any], report: ReportViolation) -> None:
    tokens = (props.get("metadataOptions") or {}).get("httpTokens")
    if tokens != "required":
        report(f"launch template must require IMDSv2 (metadataOptions.httpTokens: required), got {tokens!r}", None)


def _ebs_encrypted(props: dict[str, Any], report: ReportViolation) -> None:
    for mapping in props.get("blockDeviceMappings") or []:
        ebs = mapping.get("ebs") or {}
        if str(ebs.get("encrypted")).lower() != "true":
            report(f"EBS volume {mapping.get('deviceName')} must be encrypted (ebs.encrypted: true)", None)


def _no_public_ip_template(props: dict[str, Any], report: ReportViolation) -> None:
    for iface in props.get("networkInterfaces") or []:
        if str(iface.get("associatePublicIpAddress")).lower() == "true":
            report("node interfaces must not get public IPs (associatePublicIpAddress)", None)


def _no_public_ip_subnet(props: dict[str, Any], report: ReportViolation) -> None:
    if props.get("mapPublicIpOnLaunch"):
        report("subnets must not assign public IPs on launch (mapPublicIpOnLaunch: false)", None)


def _eks_endpoint(props: dict[str, Any], report: ReportViolation) -> None:
    vpc = props.get("vpcConfig") or {}
    if not vpc.get("endpointPrivateAccess"):
        report("the EKS API endpoint must be reachable privately (vpcConfig.endpointPrivateAccess: true)", None)
    if vpc.get("endpointPublicAccess"):
        cidrs = vpc.get("publicAccessCidrs") or []
        if not cidrs or "0.0.0.0/0" in cidrs:
            report(
                "a public EKS endpoint needs an explicit CIDR allowlist (cluster.endpointPublicAccessCidrs), "
                f"got {cidrs or 'none (open to the internet)'}",
                None,
            )


def _eks_secrets(props: dict[str, Any], report: ReportViolation) -> None:
    config = props.get("encryptionConfig") or {}
    if "secrets" not in (config.get("resources") or []) or not (config.get("provider") or {}).get("keyArn"):
        report("EKS secrets must be envelope-encrypted with a KMS key (encryptionConfig.resources: [secrets])", None)


def _bucket_public_access(props: dict[str, Any], report: ReportViolation) -> None:
    flags = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    missing = [f for f in flags if not props.get(f)]
    if missing:
        report(f"S3 public access must be fully blocked; not set: {', '.join(missing)}", None)


def _bucket_kms(props: dict[str, Any], report: ReportViolation) -> None:
    for rule in props.get("rules") or []:
        default = rule.get("applyServerSideEncryptionByDefault") or {}
        if default.get("sseAlgorithm") != "aws:kms":
            report(f"S3 encryption must use SSE-KMS (sseAlgorithm: aws:kms), got {default.get('sseAlgorithm')!r}", None)


def _ecr(props: dict[str, Any], report: ReportViolation) -> None:
    if props.get("imageTagMutability") != "IMMUTABLE":
        report("ECR repositories must have immutable tags (imageTagMutability: IMMUTABLE)", None)
    if not (props.get("imageScanningConfiguration") or {}).get("scanOnPush"):
        report("ECR repositories must scan on push (imageScanningConfiguration.scanOnPush: true)", None)


def _statements(document: Any) -> list[dict[str, Any]]:
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except json.JSONDecodeError:
            return []
    statements = (document or {}).get("Statement", []) if isinstance(document, dict) else []
    return [statements] if isinstance(statements, dict) else list(statements)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _no_wildcard_policy(props: dict[str, Any], report: ReportViolation) -> None:
    for st in _statements(props.get("policy")):
        if st.get("Effect") == "Allow" and any(a in ("*", "*:*") for a in _as_list(st.get("Action", []))):
            report('IAM policies must not allow Action "*" (wildcard admin)', None)


def _no_admin_attachment(props: dict[str, Any], report: ReportViolation) -> None:
    arn = str(props.get("policyArn", ""))
    if arn.endswith(":policy/AdministratorAccess") or arn.endswith(":policy/PowerUserAccess"):
        report(f"no role may carry {arn.rsplit('/', 1)[1]}: grant the exact permissions instead", None)


def _gpu_taint(props: dict[str, Any], report: ReportViolation) -> None:
    if "NVIDIA" not in str(props.get("amiType", "")):
        return
    taints = props.get("taints") or []
    if not any(t.get("key") == "nvidia.com/gpu" and t.get("effect") == "NO_SCHEDULE" for t in taints):
        report(
            "GPU node groups must carry the taint nvidia.com/gpu=true:NoSchedule, so CPU pods never land there", None
        )


def _policy(
    name: str, description: str, resource_type: str, check: Callable[[dict[str, Any], ReportViolation], None]
) -> ResourceValidationPolicy:
    return ResourceValidationPolicy(
        name=name, description=description, validate=_for(resource_type, check), enforcement_level=MANDATORY
    )


POLICIES: list[ResourceValidationPolicy] = [
    _policy("imdsv2-required", "Launch templates require IMDSv2.", "aws:ec2/launchTemplate:LaunchTemplate", _imdsv2),
    _policy(
        "ebs-encrypted", "Node volumes are encrypted at rest.", "aws:ec2/launchTemplate:LaunchTemplate", _ebs_encrypted
    ),
    _policy(
        "no-public-node-ip",
        "Node interfaces get no public IPs.",
        "aws:ec2/launchTemplate:LaunchTemplate",
        _no_public_ip_template,
    ),
    _policy(
        "no-public-subnet-ip", "Subnets do not map public IPs on launch.", "aws:ec2/subnet:Subnet", _no_public_ip_subnet
    ),
    _policy(
        "eks-private-endpoint", "The EKS endpoint is private or allowlisted.", "aws:eks/cluster:Cluster", _eks_endpoint
    ),
    _policy("eks-secrets-kms", "EKS secrets are encrypted with KMS.", "aws:eks/cluster:Cluster", _eks_secrets),
    _policy(
        "s3-public-access-blocked",
        "Buckets block all public access.",
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
        _bucket_public_access,
    ),
    _policy(
        "s3-sse-kms",
        "Buckets encrypt with SSE-KMS.",
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        _bucket_kms,
    ),
    _policy("ecr-immutable-scanned", "ECR tags are immutable and scanned.", "aws:ecr/repository:Repository", _ecr),
    _policy(
        "iam-no-wildcard-inline",
        "No inline policy allows Action *.",
        "aws:iam/rolePolicy:RolePolicy",
        _no_wildcard_policy,
    ),
    _policy(
        "iam-no-wildcard-managed", "No managed policy allows Action *.", "aws:iam/policy:Policy", _no_wildcard_policy
    ),
    _policy(
        "iam-no-admin-attachment",
        "No role carries AdministratorAccess.",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        _no_admin_attachment,
    ),
    _policy("gpu-node-taint", "GPU node groups carry the GPU taint.", "aws:eks/nodeGroup:NodeGroup", _gpu_taint),
]


def check(resource_type: str, props: dict[str, Any], urn: str = "", name: str = "") -> list[dict[str, Any]]:
    """Run every rule on one resource's wire-format inputs; return the violations found."""
    found: list[dict[str, Any]] = []
    opts = PolicyResourceOptions(
        protect=False,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
    )
    args = ResourceValidationArgs(resource_type, props, urn, name, opts, None)
    for policy in POLICIES:
        validate = policy.validate
        assert callable(validate)

        def report(message: str, urn_: str | None = None, _policy: str = policy.name) -> None:
            found.append({"policy": _policy, "enforcement": "mandatory", "urn": urn, "message": message})

        validate(args, report)
    return found
