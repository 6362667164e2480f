"""The inferstack policy pack: every rule, importable without starting a policy server.

``policies/__main__.py`` wraps ``POLICIES`` in one ``PolicyPack(...)`` for
``pulumi preview --policy-pack policies``: resource rules become CrossGuard
``ResourceValidationPolicy`` objects and whole-stack rules ``StackValidationPolicy`` objects.
``inferstack plan`` and the tests run the very same rule functions offline through
``check_plan`` on the mock-captured (camelCase, wire-format) inputs.

Four families: AWS resource rules (the security baseline, below), Kubernetes resource rules
(``policies/kube_rules.py``), whole-stack wiring rules (``policies/stack_rules.py``) and stack-output rules
(below), which only ``inferstack plan`` can run: CrossGuard hands policies secrets unmarked.
Exceptions live in ``policies/exceptions.py``; tier guarantees in ``policies/tiers.py``.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from components.specs import WIDEST_ALLOWLIST_PREFIX
from policies import kube_names as names
from policies import kube_rules as k8s
from policies import stack_rules as sr
from policies.exceptions import excepted
from policies.model import Res, as_int, from_plan, from_policy, known, plain
from policies.tiers import TierGuarantees, declared_by_config, declared_by_resources, tier_of

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY
Finding = tuple[str, Res | None]


def _true(value: Any) -> bool:
    """A boolean input, whether it arrives as a bool or as the string a YAML or JSON source gave."""
    return str(value).lower() == "true"


def _imds(
    options: dict[str, Any],
    what: str,
    at: str,
    report: ReportViolation,
    tokens: str | None = None,
    hops: int | None = None,
) -> None:
    """IMDSv2 with hop limit 1 in ``what``'s metadata options (``at``: where they are written); ``tokens`` and
    ``hops`` are what an unset field means there."""
    got = options.get("httpTokens", tokens)
    if got != "required":
        report(f"{what} must require IMDSv2 ({at}.httpTokens: required), got {got!r}", None)
    limit = options.get("httpPutResponseHopLimit", hops)
    if as_int(limit, 0) != 1:
        report(f"{what} must keep IMDS to the node ({at}.httpPutResponseHopLimit: 1), got {limit!r}", None)


def _imdsv2(props: dict[str, Any], report: ReportViolation) -> None:
    # Left unset, an AMI registered for IMDSv2 (AL2023's) gives hop limit 2 (EC2 API, Image.ImdsSupport),
    # which lets pods reach the node role's credentials past Pod Identity: a template must say both.
    _imds(props.get("metadataOptions") or {}, "launch template", "metadataOptions", report)


def _instance_imdsv2(props: dict[str, Any], report: ReportViolation) -> None:
    # An instance launched from a template takes the template's options, which the template's own check judges.
    if props.get("launchTemplate") and not props.get("metadataOptions"):
        return
    _imds(props.get("metadataOptions") or {}, "EC2 instance", "metadataOptions", report)


def _node_group_template(props: dict[str, Any], report: ReportViolation) -> None:
    if not props.get("launchTemplate"):
        report(
            "node group has no launch template: its instance metadata options and root volume are then EKS's and "
            "the AMI's defaults, which no input holds to IMDSv2 with hop limit 1: give it the kit's launch template",
            None,
        )


def _node_class_imdsv2(props: dict[str, Any], report: ReportViolation) -> None:
    # Karpenter's defaults, when metadataOptions or a field is left out, are httpTokens required and hop limit 1
    # (EC2NodeClass CRD schema, spec.metadataOptions): only an explicit value can weaken them.
    options = (props.get("spec") or {}).get("metadataOptions") or {}
    _imds(options, "EC2NodeClass", "spec.metadataOptions", report, tokens="required", hops=1)


def _ebs_encrypted(props: dict[str, Any], report: ReportViolation) -> None:
    for mapping in props.get("blockDeviceMappings") or []:
        if "ebs" not in mapping and (mapping.get("virtualName") or mapping.get("noDevice")):
            continue  # an instance-store volume or a suppressed device: not EBS
        ebs = mapping.get("ebs") or {}
        if not _true(ebs.get("encrypted")):
            report(f"EBS volume {mapping.get('deviceName')} must be encrypted (ebs.encrypted: true)", None)


def _ebs_volume_encrypted(props: dict[str, Any], report: ReportViolation) -> None:
    # Unset, a volume is encrypted only if the account turned on EBS encryption by default, which no input shows.
    if not _true(props.get("encrypted")):
        report("EBS volume must be encrypted (encrypted: true)", None)


def _instance_ebs_encrypted(props: dict[str, Any], report: ReportViolation) -> None:
    # Left out, the root volume takes its encryption from the AMI's snapshot (unencrypted for the public AMIs).
    if not _true((props.get("rootBlockDevice") or {}).get("encrypted")):
        report("the instance's root volume must be encrypted (rootBlockDevice.encrypted: true)", None)
    for device in props.get("ebsBlockDevices") or []:
        if not _true(device.get("encrypted")):
            report(f"EBS volume {device.get('deviceName')} must be encrypted (ebsBlockDevices[].encrypted: true)", None)


def _node_class_ebs_encrypted(props: dict[str, Any], report: ReportViolation) -> None:
    # `encrypted` has no default in the EC2NodeClass schema: unset, the account's EBS default decides. Without
    # blockDeviceMappings Karpenter uses the AMI family's defaults, which are encrypted.
    _ebs_encrypted(props.get("spec") or {}, report)


def _no_public_ip_template(props: dict[str, Any], report: ReportViolation) -> None:
    for iface in props.get("networkInterfaces") or []:
        if _true(iface.get("associatePublicIpAddress")):
            report("node interfaces must not get public IPs (associatePublicIpAddress)", None)


def _no_public_ip_instance(props: dict[str, Any], report: ReportViolation) -> None:
    if _true(props.get("associatePublicIpAddress")):
        report("instances must not get public IPs (associatePublicIpAddress: false)", None)


def _no_public_ip_subnet(props: dict[str, Any], report: ReportViolation) -> None:
    if props.get("mapPublicIpOnLaunch"):
        report("subnets must not assign public IPs on launch (mapPublicIpOnLaunch: false)", None)


UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")
"""IPv6's private range (RFC 4193), the one private range wider than /8."""


def _internet_ranges(*ranges: Any) -> list[str]:
    """The source ranges that reach into the internet: wider than any one organisation's network, the config's
    allowlist bound (``[0.0.0.0/1, 128.0.0.0/1]`` is ``0.0.0.0/0`` in two halves), and not private."""
    wide = []
    for cidr in ranges:
        try:
            network = ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            continue  # unset, unknown during preview, or a value EC2 refuses itself
        private = isinstance(network, ipaddress.IPv6Network) and network.subnet_of(UNIQUE_LOCAL)
        if network.prefixlen < WIDEST_ALLOWLIST_PREFIX and not private:
            wide.append(str(cidr))
    return wide


def _eks_endpoint(props: dict[str, Any], report: ReportViolation) -> None:
    vpc = props.get("vpcConfig") or {}
    if not vpc.get("endpointPrivateAccess"):
        report("the EKS API endpoint must be reachable privately (vpcConfig.endpointPrivateAccess: true)", None)
    # Left out, endpointPublicAccess is true and publicAccessCidrs 0.0.0.0/0: the EKS API's defaults
    # (https://docs.aws.amazon.com/eks/latest/APIReference/API_VpcConfigRequest.html).
    if _true(vpc.get("endpointPublicAccess", True)):
        cidrs = vpc.get("publicAccessCidrs") or []
        wide = _internet_ranges(*cidrs)
        if not cidrs or wide:
            unset = (
                "" if "endpointPublicAccess" in vpc else " (vpcConfig.endpointPublicAccess unset: the API's default)"
            )
            report(
                f"the EKS API endpoint is public{unset} and open to {wide or 'the internet'}: set "
                "vpcConfig.endpointPublicAccess: false, or give it an explicit CIDR allowlist, each "
                f"/{WIDEST_ALLOWLIST_PREFIX} or longer (cluster.endpointPublicAccessCidrs)",
                None,
            )


def _eks_secrets(props: dict[str, Any], report: ReportViolation) -> None:
    config = props.get("encryptionConfig") or {}
    if "secrets" not in (config.get("resources") or []) or not (config.get("provider") or {}).get("keyArn"):
        report("EKS secrets must be envelope-encrypted with a KMS key (encryptionConfig.resources: [secrets])", None)


OPT_IN = f'tag {k8s.INTERNET_OPT_IN}: "true"'
"""The deliberate opt-in an AWS resource of a user's own carries to face the internet: the tag twin of the annotation
a Kubernetes Service carries (``k8s-no-internet-facing-service``)."""


def _opted_in(props: dict[str, Any]) -> bool:
    return _true((props.get("tags") or {}).get(k8s.INTERNET_OPT_IN))


def _lb_internal(props: dict[str, Any], report: ReportViolation) -> None:
    # Scheme, unset: "The default is an Internet-facing load balancer", and a Gateway Load Balancer takes none: it sits
    # in the VPC's traffic path, with no address of its own (ELBv2 API, CreateLoadBalancer:
    # https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_CreateLoadBalancer.html; the classic
    # ELB API's CreateLoadBalancer defaults to internet-facing too).
    if props.get("loadBalancerType") == "gateway" or _opted_in(props):
        return
    internal = props.get("internal")
    if internal is None or (known(internal) and not _true(internal)):
        unset = " (internal unset: Elastic Load Balancing's default scheme)" if internal is None else ""
        report(
            f"the load balancer is internet-facing{unset}: set internal: true, or, if it is meant to face the "
            f"internet, opt in with the {OPT_IN}",
            None,
        )


def _open_to(what: str, wide: list[str], fix: str) -> str:
    return (
        f"{what} admits {', '.join(wide)}: the internet. Admit only the networks that need it (a VPC or office CIDR, "
        f"/{WIDEST_ALLOWLIST_PREFIX} or longer; a security group; a prefix list), or, if it is meant to face the "
        f"internet, {fix}"
    )


def _group_ingress(props: dict[str, Any], report: ReportViolation) -> None:
    # Egress is not judged: a node's traffic out to anywhere (image pulls, AWS APIs through the NAT) is the norm.
    if _opted_in(props):
        return
    for i, rule in enumerate(props.get("ingress") or []):
        wide = _internet_ranges(*(rule.get("cidrBlocks") or []), *(rule.get("ipv6CidrBlocks") or []))
        if wide:
            report(_open_to(f"security group ingress[{i}]", wide, f"opt the group in with the {OPT_IN}"), None)


def _legacy_rule_ingress(props: dict[str, Any], report: ReportViolation) -> None:
    # aws.ec2.SecurityGroupRule has no tags: the provider's docs steer to aws.vpc.SecurityGroupIngressRule instead.
    if props.get("type") != "ingress":
        return
    wide = _internet_ranges(*(props.get("cidrBlocks") or []), *(props.get("ipv6CidrBlocks") or []))
    if wide:
        fix = f"write it as an aws.vpc.SecurityGroupIngressRule (one range each) with the {OPT_IN}"
        report(_open_to("security group rule (type ingress)", wide, fix), None)


def _ingress_rule(props: dict[str, Any], report: ReportViolation) -> None:
    wide = [] if _opted_in(props) else _internet_ranges(props.get("cidrIpv4"), props.get("cidrIpv6"))
    if wide:
        report(_open_to("security group ingress rule", wide, f"opt the rule in with the {OPT_IN}"), None)


def _bucket_public_access(props: dict[str, Any], report: ReportViolation) -> None:
    flags = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    missing = [f for f in flags if not props.get(f)]
    if missing:
        report(f"S3 public access must be fully blocked; not set: {', '.join(missing)}", None)


KMS_ALGORITHMS = ("aws:kms", "aws:kms:dsse")
"""SSE-KMS and dual-layer SSE-KMS (the S3 API's ServerSideEncryption values)."""


def _bucket_kms(props: dict[str, Any], report: ReportViolation) -> None:
    rules = props.get("rules") or []
    if not rules:
        report(
            "S3 encryption configuration has no rule: set applyServerSideEncryptionByDefault.sseAlgorithm: aws:kms",
            None,
        )
    for rule in rules:
        default = rule.get("applyServerSideEncryptionByDefault") or {}
        if default.get("sseAlgorithm") not in KMS_ALGORITHMS:
            report(f"S3 encryption must use SSE-KMS (sseAlgorithm: aws:kms), got {default.get('sseAlgorithm')!r}", None)


def _inline_bucket_kms(props: dict[str, Any], report: ReportViolation) -> None:
    # The deprecated inline blocks: Bucket's serverSideEncryptionConfiguration.rule, BucketV2's list of them.
    single = props.get("serverSideEncryptionConfiguration")
    blocks = [single] if isinstance(single, dict) else props.get("serverSideEncryptionConfigurations") or []
    for block in blocks:
        rules = block.get("rules") or ([block["rule"]] if block.get("rule") else [])
        _bucket_kms({"rules": rules}, report)


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


def _cache_encrypted(props: dict[str, Any], report: ReportViolation) -> None:
    if not _true(props.get("atRestEncryptionEnabled")):
        report("the cache must be encrypted at rest (atRestEncryptionEnabled: true)", None)
    if not _true(props.get("transitEncryptionEnabled")):
        report("the cache must require TLS (transitEncryptionEnabled: true)", None)
    elif props.get("transitEncryptionMode", "required") != "required":
        # `preferred` accepts plaintext clients too: it is ElastiCache's migration mode
        # (https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/in-transit-encryption-enable.html).
        report(
            f"the cache must refuse plaintext clients (transitEncryptionMode: required), got "
            f"{props.get('transitEncryptionMode')!r}",
            None,
        )
    if not props.get("authToken") and not props.get("authTokenWo") and not props.get("userGroupIds"):
        report("the cache must authenticate clients: an AUTH token (authToken) or RBAC users (userGroupIds)", None)


def _standalone_cache(props: dict[str, Any], report: ReportViolation) -> None:
    # A cluster outside a replication group has no at-rest encryption, AUTH token or user group
    # (aws_elasticache_cluster's arguments): only a replication group can meet the baseline.
    if not props.get("replicationGroupId"):
        report(
            "a standalone cache cluster cannot be encrypted at rest or require AUTH: create a ReplicationGroup", None
        )


def _serverless_cache_users(props: dict[str, Any], report: ReportViolation) -> None:
    # A serverless cache always has TLS and at-rest encryption, but no AUTH token: RBAC is the only way to control
    # access to it (https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/Clusters.RBAC.html).
    if str(props.get("engine", "")).lower() == "memcached":
        # UserGroupId is "Available for Valkey and Redis OSS only" (ElastiCache API, CreateServerlessCache).
        report(
            "a serverless Memcached cache has no access control (no RBAC users): use engine valkey with a user group",
            None,
        )
    elif not props.get("userGroupId"):
        report("the serverless cache must authenticate clients: give it RBAC users (userGroupId)", None)


def _cache_user_password(props: dict[str, Any], report: ReportViolation) -> None:
    mode = (props.get("authenticationMode") or {}).get("type")
    enabled = str(props.get("accessString", "")).split(" ", 1)[0] == "on"
    if enabled and (_true(props.get("noPasswordRequired")) or mode == "no-password-required"):
        report(
            f"cache user {props.get('userName')!r} is enabled without a password: give it one (or switch it off)", None
        )


# ---------------------------------------------------------------------------------------------
# Stack outputs: ``pulumi stack output`` prints a plain output to anyone who can read the stack.
#
# These rules run in ``inferstack plan`` only, which knows which outputs are secret. Under ``pulumi preview`` the root
# ``pulumi:pulumi:Stack`` resource and its outputs do reach a StackValidationPolicy (the engine analyzes every new
# resource state, outputs included), but pulumi_policy's AnalyzeStack deserializes them without keeping secrets
# marked (pulumi/pulumi-policy#241): a secret output and a plain one look the same there, so the pack leaves them out.

SECRET_REFERENCE = re.compile(r"(?i)[-_](name|arn|id|url|path)$")
"""An output that says where a secret is kept (``api_key_secret_name``, ``..._secret_arn``) names it, not holds it;
a URL that carries a password is still caught by its value."""


def plain_secret_outputs(outputs: Mapping[str, Any]) -> Iterator[Finding]:
    """A stack output named like a secret, or holding a credential, that is not a Pulumi secret."""
    for name, output in outputs.items():
        for path, key, value in k8s.walk(output, str(name), str(name)):
            if not isinstance(value, str) or not value.strip() or value == "[secret]" or not known(value):
                continue
            if k8s.SECRET_NAME.search(key) and not SECRET_REFERENCE.search(key):
                what = "is named like a secret"
            elif k8s.SECRET_VALUE.search(value):
                what = "holds a credential"
            else:
                continue
            yield (
                f"stack output {path} {what} but is exported in plain text, which `pulumi stack output` shows to "
                "anyone who can read the stack: export it as pulumi.Output.secret(...)",
                None,
            )


# ---------------------------------------------------------------------------------------------
# The registry: every rule once, with its id, kind, declared enforcement and what it checks.


@dataclass(frozen=True)
class Rule:
    id: str
    kind: Literal["resource", "stack", "outputs"]
    enforcement: EnforcementLevel
    description: str
    check: Callable[[Any], Iterable[Finding]]
    """resource rules: ``Res`` → findings; stack rules: ``stack_rules.Stack`` → findings; output rules: the stack's
    outputs, secrets masked as ``[secret]`` → findings (``inferstack plan`` only, see "Stack outputs")."""

    @property
    def effective(self) -> EnforcementLevel:
        """The enforcement the rule runs at (its declared one)."""
        return self.enforcement


def _aws(
    resource_type: str, check: Callable[[dict[str, Any], ReportViolation], None]
) -> Callable[[Res], Iterable[Finding]]:
    def run(res: Res) -> Iterator[Finding]:
        if res.type != resource_type:
            return
        found: list[str] = []

        def collect(message: str, urn: str | None = None) -> None:
            found.append(message)

        check(dict(res.inputs), collect)
        for message in found:
            yield message, None

    return run


def _any(*checks: Callable[[Res], Iterable[Finding]]) -> Callable[[Res], Iterable[Finding]]:
    """One rule over several resource types (each check returns nothing for the others)."""

    def run(res: Res) -> Iterator[Finding]:
        for check in checks:
            yield from check(res)

    return run


def _resource(
    id: str, description: str, check: Callable[[Res], Iterable[Finding]], level: EnforcementLevel = MANDATORY
) -> Rule:
    return Rule(id, "resource", level, description, check)


def _stack(
    id: str, description: str, check: Callable[[sr.Stack], Iterable[Finding]], level: EnforcementLevel = MANDATORY
) -> Rule:
    return Rule(id, "stack", level, description, check)


LT = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
INSTANCE = "aws:ec2/instance:Instance"

RULES: tuple[Rule, ...] = (
    # AWS resources: the security baseline.
    _resource(
        "imdsv2-required",
        "Nodes and EC2 instances require IMDSv2 with hop limit 1 (launch templates, node groups, EC2NodeClasses).",
        _any(
            _aws(LT, _imdsv2),
            _aws(INSTANCE, _instance_imdsv2),
            _aws("aws:eks/nodeGroup:NodeGroup", _node_group_template),
            _aws(NODE_CLASS, _node_class_imdsv2),
        ),
    ),
    _resource(
        "ebs-encrypted",
        "EBS volumes are encrypted at rest: nodes', instances', standalone ones and those a StorageClass provisions.",
        _any(
            _aws(LT, _ebs_encrypted),
            _aws(NODE_CLASS, _node_class_ebs_encrypted),
            _aws("aws:ebs/volume:Volume", _ebs_volume_encrypted),
            _aws(INSTANCE, _instance_ebs_encrypted),
            k8s.ebs_storage_class_encrypted,
        ),
    ),
    _resource(
        "no-public-node-ip",
        "Node and instance interfaces get no public IPs.",
        _any(_aws(LT, _no_public_ip_template), _aws(INSTANCE, _no_public_ip_instance)),
    ),
    _resource(
        "no-public-subnet-ip",
        "Subnets do not map public IPs on launch.",
        _aws("aws:ec2/subnet:Subnet", _no_public_ip_subnet),
    ),
    _resource(
        "eks-private-endpoint",
        "The EKS endpoint is private or allowlisted.",
        _aws("aws:eks/cluster:Cluster", _eks_endpoint),
    ),
    _resource(
        "sg-no-internet-ingress",
        "No security group admits ingress from the internet unless tagged as a deliberate opt-in.",
        _any(
            _aws("aws:ec2/securityGroup:SecurityGroup", _group_ingress),
            _aws("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup", _group_ingress),
            _aws("aws:ec2/securityGroupRule:SecurityGroupRule", _legacy_rule_ingress),
            _aws("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", _ingress_rule),
        ),
    ),
    _resource(
        "elb-internal",
        "Load balancers are internal unless tagged as a deliberate internet-facing opt-in.",
        _any(*(_aws(f"aws:{module}/loadBalancer:LoadBalancer", _lb_internal) for module in ("lb", "alb", "elb"))),
    ),
    _resource("eks-secrets-kms", "EKS secrets are encrypted with KMS.", _aws("aws:eks/cluster:Cluster", _eks_secrets)),
    _resource(
        "s3-public-access-blocked",
        "Buckets block all public access.",
        _aws("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", _bucket_public_access),
    ),
    _resource(
        "s3-sse-kms",
        "Buckets encrypt with SSE-KMS.",
        _any(
            *(_aws(t, _bucket_kms) for t in sr.BUCKET_ENCRYPTION_TYPES),
            *(_aws(t, _inline_bucket_kms) for t in sr.BUCKET_TYPES),
        ),
    ),
    _resource(
        "ecr-immutable-scanned", "ECR tags are immutable and scanned.", _aws("aws:ecr/repository:Repository", _ecr)
    ),
    _resource(
        "iam-no-wildcard-inline",
        "No inline policy allows Action *.",
        _aws("aws:iam/rolePolicy:RolePolicy", _no_wildcard_policy),
    ),
    _resource(
        "iam-no-wildcard-managed",
        "No managed policy allows Action *.",
        _aws("aws:iam/policy:Policy", _no_wildcard_policy),
    ),
    _resource(
        "iam-no-admin-attachment",
        "No role carries AdministratorAccess.",
        _aws("aws:iam/rolePolicyAttachment:RolePolicyAttachment", _no_admin_attachment),
    ),
    _resource(
        "gpu-node-taint", "GPU node groups carry the GPU taint.", _aws("aws:eks/nodeGroup:NodeGroup", _gpu_taint)
    ),
    _resource(
        "elasticache-encrypted-authenticated",
        "The cache is encrypted at rest and in transit and authenticates every client.",
        _any(
            _aws("aws:elasticache/replicationGroup:ReplicationGroup", _cache_encrypted),
            _aws("aws:elasticache/cluster:Cluster", _standalone_cache),
            _aws("aws:elasticache/serverlessCache:ServerlessCache", _serverless_cache_users),
            _aws("aws:elasticache/user:User", _cache_user_password),
        ),
    ),
    # Kubernetes objects, one at a time.
    _resource("pss-run-as-non-root", "Pod Security restricted: containers run as non-root.", k8s.pss_non_root),
    _resource(
        "pss-no-privilege-escalation",
        "Pod Security restricted: allowPrivilegeEscalation is false.",
        k8s.pss_no_privilege_escalation,
    ),
    _resource(
        "pss-drop-all-capabilities", "Pod Security restricted: drop ALL, add nothing.", k8s.pss_drop_all_capabilities
    ),
    _resource("pss-seccomp-runtime-default", "Pod Security restricted: seccomp RuntimeDefault.", k8s.pss_seccomp),
    _resource(
        "pss-no-host-namespaces-or-privileged",
        "Pod Security baseline: no host namespaces, privileged containers or host ports.",
        k8s.pss_host_and_privileged,
    ),
    _resource(
        "pss-restricted-volume-types",
        "Pod Security restricted: volume types (hostPath only as allowed).",
        k8s.pss_volume_types,
    ),
    _resource(
        "k8s-read-only-root-filesystem",
        "Containers run with a read-only root filesystem, unless an allowance names the image and why.",
        k8s.read_only_root,
    ),
    _resource(
        "k8s-cpu-memory-requests",
        "Every container, init and Job ones included, requests CPU and memory.",
        k8s.resource_requests,
    ),
    _resource("k8s-image-pinned-by-digest", "Images are pinned by digest or an allow-listed tag.", k8s.image_digest),
    _resource("k8s-no-latest-tag", "No image floats with :latest or no tag.", k8s.no_latest),
    _resource(
        "k8s-automount-token-off",
        "Pods do not mount a service-account token unless they talk to the API.",
        k8s.automount_token_off,
    ),
    _resource(
        "k8s-no-internet-facing-service",
        "No internet-facing Service or Ingress without the opt-in annotation (inferstack.io/internet-facing).",
        k8s.no_internet_facing,
    ),
    _resource("k8s-no-secret-in-configmap", "ConfigMaps hold no secret values.", k8s.no_secret_in_configmap),
    _resource(
        "k8s-no-secret-in-env", "No secret value in a container's plain env or command line.", k8s.no_secret_in_env
    ),
    _resource("helm-chart-pinned", "Helm charts are pinned to one exact version.", k8s.helm_chart_pinned),
    _resource(
        "k8s-names-valid",
        "Names, namespaces, labels and annotation keys are ones the API server accepts.",
        names.names_valid,
    ),
    _resource(
        "helm-no-default-admin-credentials",
        "No chart keeps a default admin password.",
        k8s.no_default_admin_credentials,
    ),
    _resource(
        "helm-alerts-reach-a-person",
        "Alertmanager sends alerts somewhere (a receiver other than the chart's null one).",
        k8s.alerts_reach_a_person,
        ADVISORY,
    ),
    # The stack's outputs (inferstack plan only).
    Rule(
        "stack-no-plain-secret-output",
        "outputs",
        MANDATORY,
        "No stack output named like a secret, or holding a credential, is exported in plain text.",
        plain_secret_outputs,
    ),
    # The whole stack: links between resources.
    _stack(
        "stack-storage-provisioner",
        "Every claim resolves to a StorageClass whose provisioner runs.",
        sr.storage_provisioner,
    ),
    _stack(
        "stack-load-balancer-controller",
        "Every LoadBalancer Service and Ingress has a controller.",
        sr.lb_controller_present,
    ),
    _stack(
        "stack-load-balancer-annotations",
        "A Service's LB annotations are read by the controller serving it.",
        sr.lb_annotations_read,
    ),
    _stack(
        "stack-node-selectors-match-pools",
        "Every workload's selector, affinity and tolerations match a node pool.",
        sr.node_selectors_match,
    ),
    _stack(
        "stack-device-plugin-coverage",
        "GPU, EFA and RDMA pods land only where the device plugin runs.",
        sr.device_plugin_coverage,
    ),
    _stack(
        "stack-object-store-permissions",
        "Each pod's role allows the object-store actions its command performs.",
        sr.object_store_access,
    ),
    _stack(
        "stack-kube-objects-unique",
        "No two resources create the same Kubernetes object or Helm release.",
        names.objects_unique,
    ),
    _stack(
        "stack-workload-selectors-disjoint",
        "No workload's selector matches another workload's pods.",
        sr.workload_selectors_disjoint,
    ),
    _stack(
        "stack-service-account-exists",
        "Every pod's service account is created by the stack.",
        sr.service_accounts_exist,
    ),
    _stack(
        "stack-s3-bucket-protected",
        "Every bucket has an SSE-KMS configuration and a public access block.",
        sr.buckets_protected,
    ),
    _stack(
        "stack-network-policy-enforced", "NetworkPolicies only where the CNI enforces them.", sr.network_policy_enforced
    ),
    _stack(
        "stack-network-policy-guards-cache-and-servers",
        "The cache and the model servers admit only named peers (NetworkPolicy).",
        sr.network_policy_guards,
    ),
    _stack("stack-gpu-capacity-fits-pool", "Replicas x GPUs per replica fit the pool's maximum.", sr.gpu_capacity_fits),
    _stack(
        "stack-parallelism-matches-gpus",
        "TP x PP equals the GPUs per pod x pods per group, within a node.",
        sr.parallelism_matches,
    ),
    _stack(
        "stack-fabric-device-requested", "Pods that use EFA or RDMA request the device.", sr.fabric_device_requested
    ),
    _stack(
        "stack-engine-args-supported",
        "Every engine argument is supported by the pinned image.",
        sr.engine_args_supported,
    ),
    _stack(
        "stack-host-memory-stages-weights",
        "Host memory ≥ 1.5 x the node's GPU memory.",
        sr.host_memory_stages_weights,
        ADVISORY,
    ),
    _stack(
        "stack-autoscaler-max-fits-pool",
        "An autoscaler's maximum fits the pool's GPUs.",
        sr.autoscaler_max_fits,
        ADVISORY,
    ),
)
RULES_BY_ID = {r.id: r for r in RULES}
assert len(RULES_BY_ID) == len(RULES), "rule ids are unique"


def _kept(rule: Rule, res: Res | None) -> bool:
    return res is None or excepted(rule.id, res.name) is None


def _resource_policy(rule: Rule) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        res = Res(args.urn, args.resource_type, args.name, plain(args.props))
        for message, _ in rule.check(res):
            if _kept(rule, res):
                report(message, None)

    return ResourceValidationPolicy(
        name=rule.id, description=rule.description, validate=validate, enforcement_level=rule.effective
    )


def _stack_policy(rule: Rule) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        resources = from_policy(args.resources)
        tier = tier_of(resources)
        for message, res in rule.check(sr.Stack(resources, tier, declared_by_resources(tier, resources))):
            if _kept(rule, res):
                report(message, res.urn if res else None)

    return StackValidationPolicy(
        name=rule.id, description=rule.description, validate=validate, enforcement_level=rule.effective
    )


POLICIES: list[ResourceValidationPolicy | StackValidationPolicy] = [
    _resource_policy(r) if r.kind == "resource" else _stack_policy(r) for r in RULES if r.kind != "outputs"
]
"""Every rule but the output rules, which no CrossGuard policy could judge (see "Stack outputs")."""


def _violation(rule: Rule, message: str, urn: str | None) -> dict[str, Any]:
    return {"policy": rule.id, "enforcement": rule.effective.value, "urn": urn, "message": message}


def check(resource_type: str, props: dict[str, Any], urn: str = "", name: str = "") -> list[dict[str, Any]]:
    """Run every resource rule on one resource's wire-format inputs; return the violations found."""
    res = Res(urn, resource_type, name, plain(props))
    return [
        _violation(rule, message, urn or None)
        for rule in RULES
        if rule.kind == "resource"
        for message, _ in rule.check(res)
        if _kept(rule, res)
    ]


def check_stack(
    resources: Iterable[Any], tier: str | None = None, declared: TierGuarantees | None = None
) -> list[dict[str, Any]]:
    """Run every whole-stack rule on a plan's resources (registrations or plan-JSON dicts)."""
    items = from_plan(resources)
    tier = tier_of(items, tier)
    stack = sr.Stack(items, tier, declared or declared_by_resources(tier, items))
    return [
        _violation(rule, message, res.urn if res else None)
        for rule in RULES
        if rule.kind == "stack"
        for message, res in rule.check(stack)
        if _kept(rule, res)
    ]


def check_outputs(outputs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Run every output rule on a plan's outputs (secret ones masked as ``[secret]``, as the plan JSON has them)."""
    return [
        _violation(rule, message, None)
        for rule in RULES
        if rule.kind == "outputs"
        for message, _ in rule.check(outputs)
    ]


def check_plan(
    resources: Iterable[Any],
    tier: str | None = None,
    environment: object | None = None,
    outputs: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every rule of the pack, offline: what ``inferstack plan`` reports (format in the README).

    ``environment``: the stack's validated config, whose declarations about an existing cluster
    (``policies.tiers.declared_by_config``) count as that cluster's guarantees. ``outputs``: the stack's
    outputs, secret ones masked as ``[secret]``; without them the output rules do not run."""
    items = from_plan(resources)
    found = [v for r in items for v in check(r.type, dict(r.inputs), r.urn, r.name)]
    declared = declared_by_config(tier_of(items, tier), environment) if environment is not None else None
    return found + check_stack(items, tier, declared) + (check_outputs(outputs) if outputs is not None else [])
