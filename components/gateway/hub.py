"""HubReference: the stack an edge site or an on-prem stack sends overflow and complex prompts to (its hub).

A Pulumi ``StackReference`` (facts-tiers §9): an output the hub exported as a secret stays secret here, and one it
does not export (Pulumi drops an output whose value is ``None``: a hub with its gateway or its burst tenant off)
stops the update with one line naming the fix, where ``require_output`` raised a bare ``KeyError``. Under
``inferstack plan`` the mock engine answers the reference with clearly marked placeholders
(``inferstack_cli/mocks.py``).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pulumi

from components.specs import Args

GATEWAY_URL_OUTPUT = "gateway_url"
BURST_KEY_OUTPUT = "burst_api_key"
"""What a hub stack exports for the stacks that send traffic to it: its gateway's reachable ``/v1`` URL, and a
key it issued to them, as a secret output."""


class HubReferenceArgs(Args):
    stack: str
    """``<organization>/<project>/<stack>`` of the hub."""
    ca_config_map: str | None = None
    """The sending stack's ``hub.caConfigMap``: the CA it verifies the hub's HTTPS certificate with, so the hub's
    ``gateway_url`` must be ``https://``."""


class HubReference(pulumi.ComponentResource):
    gateway_url: pulumi.Output[str]
    api_key: pulumi.Output[str]
    """Secret."""

    def __init__(self, name: str, args: HubReferenceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:hub_reference:HubReference", name, None, opts)
        ref = pulumi.StackReference(name, stack_name=args.stack, opts=pulumi.ResourceOptions(parent=self))
        self.gateway_url = _exported(
            ref, args.stack, GATEWAY_URL_OUTPUT, "its gateway is off", "gateway.enabled: true"
        ).apply(lambda url: _reachable(url, args.stack, args.ca_config_map))
        self.api_key = pulumi.Output.secret(
            _exported(ref, args.stack, BURST_KEY_OUTPUT, "its burst tenant is off", "gateway.burstTenant.enabled: true")
        )
        self.register_outputs({"gateway_url": self.gateway_url})


def in_cluster(url: str) -> bool:
    """Whether ``url`` names a Kubernetes Service (``*.svc``): it resolves in the cluster that dials it, never to
    another stack's hub."""
    host = (urlsplit(url).hostname or "").rstrip(".")
    return host.endswith(".svc") or host.endswith(".svc.cluster.local")


def _reachable(url: str, stack: str, ca_config_map: str | None = None) -> str:
    """``url``, unless it is the hub's in-cluster one (its gateway has no load balancer and no ``hubUrl``): a
    ``*.svc`` name resolves in the sending stack's own cluster, where the kit's gateway has the same Service name and
    namespace, so the overflow would go back to this stack's own gateway. Nor a plain ``http://`` one when the sending
    stack names a CA for the hub's certificate (``hub.caConfigMap``): the gateway takes a CA for an https upstream
    only, and its config, rendered from this URL, would fail inside the update with a traceback. The in-cluster URL is
    named first: serving TLS there, or dropping the CA, would not make it reachable."""
    if in_cluster(url):
        raise pulumi.RunError(
            f"inferstack:environment.hub.stack: got {stack!r}, which exports its in-cluster URL {url} (its gateway "
            "has no load balancer), a name that resolves to this stack's own gateway here; allowed: a hub reachable "
            "from this cluster; fix: set gateway.loadBalancer: internal (or gateway.hubUrl) in the hub stack and "
            "`pulumi up` it, or name the hub by hub.url + hub.apiKeySecret"
        )
    if ca_config_map is not None and not url.startswith("https://"):
        raise pulumi.RunError(
            f"inferstack:environment.hub.caConfigMap: got {ca_config_map!r} for hub stack {stack!r}, which exports "
            f"the plain-HTTP URL {url} (its gateway serves no TLS); allowed: a CA only for a hub reached over "
            "https://; fix: remove hub.caConfigMap, or serve TLS in the hub stack (gateway.tlsSecret on-prem, "
            "gateway.tlsCertificateArn on the cloud) and `pulumi up` it"
        )
    return url


def _exported(ref: pulumi.StackReference, stack: str, output: str, why: str, setting: str) -> pulumi.Output[str]:
    """``output`` of the hub stack, or a ``RunError`` (Pulumi reports it without a traceback) naming the fix."""

    def present(value: str | None) -> str:
        if value is None:
            raise pulumi.RunError(
                f"inferstack:environment.hub.stack: got {stack!r}, which exports no {output} ({why}, or it was never "
                f"deployed); allowed: a hub stack that exports {GATEWAY_URL_OUTPUT} and {BURST_KEY_OUTPUT}; fix: set "
                f"{setting} in the hub stack and `pulumi up` it, or name the hub by hub.url + hub.apiKeySecret"
            )
        return value

    # get_output keeps the output's own secrecy (require_output's, without its KeyError).
    return ref.get_output(output).apply(present)
