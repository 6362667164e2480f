"""inferstack's LLM gateway. `inferstack_gateway.config.GatewayConfig` is the config schema."""

__version__ = "0.1.0"
