"""HubReference: the stack an edge site or an on-prem stack sends overflow and complex prompts to (its hub).

A Pulumi ``StackReference`` (facts-tiers §9): ``require_output`` fails the update when the hub does not export the
output, and an output the hub exported as a secret stays secret here. Under ``inferstack plan`` the mock engine
answers the reference with clearly marked placeholders (``inferstack_cli/mocks.py``).
"""

from __future__ import annotations

import pulumi

from components.specs import Args

GATEWAY_URL_OUTPUT = "gateway_url"
BURST_KEY_OUTPUT = "burst_api_key"
"""What a hub stack exports for the stacks that send traffic to it: its gateway's reachable ``/v1`` URL, and a
key it issued to them, as a secret output."""


class HubReferenceArgs(Args):
    stack: str
    """``<organization>/<project>/<stack>`` of the hub."""


class HubReference(pulumi.ComponentResource):
    gateway_url: pulumi.Output[str]
    api_key: pulumi.Output[str]
    """Secret."""

    def __init__(self, name: str, args: HubReferenceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:hub_reference:HubReference", name, None, opts)
        ref = pulumi.StackReference(name, stack_name=args.stack, opts=pulumi.ResourceOptions(parent=self))
        self.gateway_url = ref.require_output(GATEWAY_URL_OUTPUT)
        self.api_key = pulumi.Output.secret(ref.require_output(BURST_KEY_OUTPUT))
        self.register_outputs({"gateway_url": self.gateway_url})
