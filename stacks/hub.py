"""Hybrid burst, the side that sends traffic: the stack's hub as the gateway's remote upstream (edge, on-prem).

The hub is another stack of this project (a Pulumi StackReference: its ``gateway_url`` and secret
``burst_api_key`` outputs) or an explicit URL with a secret config value holding its key.
"""

from __future__ import annotations

from typing import Any

from components.gateway.gateway import HubUpstream
from components.gateway.hub import HubReference, HubReferenceArgs
from components.specs import HubSpec
from stacks.program import require_secret


def hub_upstream(hub: HubSpec | None, quick_start: str) -> HubUpstream | None:
    """The gateway's ``hub`` upstream for ``hub``; ``None`` without one."""
    if hub is None:
        return None
    if hub.stack is not None:
        # Another stack of this project: Output values; the key stays secret end to end.
        ref = HubReference("hub", HubReferenceArgs(stack=hub.stack, ca_config_map=hub.ca_config_map))
        url: Any = ref.gateway_url
        key: Any = ref.api_key
    else:
        assert hub.url is not None and hub.api_key_secret is not None  # hub_checks refuses anything else
        url = hub.url
        key = require_secret(hub.api_key_secret, "the key the hub issued to this stack", quick_start)
    return HubUpstream(
        url=url, api_key=key, model=hub.model, fallback=hub.fallback, ca_config_map=hub.ca_config_map, ca_key=hub.ca_key
    )
