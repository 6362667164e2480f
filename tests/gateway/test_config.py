"""Section 6: one YAML config, validated by pydantic, errors that name the key and the fix, ${VAR} interpolation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferstack_gateway.cli import main
from inferstack_gateway.config import ConfigError, GatewayConfig, load_config, parse_config, render_yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "images" / "gateway" / "config.example.yaml"
ENV = {
    "GATEWAY_UPSTREAM_URL": "http://vllm:8000/v1",
    "GATEWAY_REDIS_URL": "redis://cache:6379/0",
    "GATEWAY_EMBEDDINGS_URL": "http://embeddings:8000/v1",
    "GATEWAY_API_KEY": "sk-local",
}


def minimal(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "upstreams": {"vllm": {"url": "http://vllm:8000/v1"}},
        "tiers": {"small": {"upstreams": ["vllm"]}},
        "models": {"local": {"tier": "small", "cache": {"policy": "never"}}},
        "auth": {"enabled": False},
    }
    config.update(overrides)
    return config


def error_of(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, env={}, source="gateway.yaml")
    return str(caught.value)


def test_the_example_config_loads_with_its_documented_environment() -> None:
    config = load_config(EXAMPLE, env=ENV)
    assert config.server.port == 8080
    assert config.upstreams["local"].url == "http://vllm:8000/v1"
    assert config.models["local"].cache.semantic.enabled and config.models["local"].cache.policy == "temperature_zero"
    assert config.auth.keys[0].key is not None and config.auth.keys[0].key.get_secret_value() == "sk-local"


def test_defaults_and_variables_are_interpolated() -> None:
    config = load_config(EXAMPLE, env={**ENV, "GATEWAY_PORT": "9000"})
    assert config.server.port == 9000


def test_a_missing_variable_names_the_key_and_the_fix() -> None:
    env = {k: v for k, v in ENV.items() if k != "GATEWAY_REDIS_URL"}
    with pytest.raises(ConfigError) as caught:
        load_config(EXAMPLE, env=env)
    assert str(caught.value) == (
        "redis.url: environment variable GATEWAY_REDIS_URL is not set. "
        "Fix: export GATEWAY_REDIS_URL, or write ${GATEWAY_REDIS_URL:-<default>} in the config"
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"tiers": {"small": {"upstreams": ["nope"]}}},
         "tiers.small.upstreams.0: 'nope' is not defined under `upstreams:`. Fix: use one of vllm, or add it under "
         "`upstreams:`"),
        ({"models": {"local": {"tier": "huge"}}},
         "models.local.tier: 'huge' is not defined under `tiers:`. Fix: use one of small"),
        ({"models": {"local": {"tier": "small", "cache": {"policy": "sometimes"}}}},
         "models.local.cache.policy: Input should be 'temperature_zero', 'always' or 'never' (got 'sometimes'). "
         "Fix: use one of 'temperature_zero', 'always' or 'never'"),
        ({"models": {"local": {"tier": "small", "cache": {"semantic": {"enabled": True, "max_distance": 3}}}}},
         "models.local.cache.semantic.max_distance: Input should be less than or equal to 2 (got 3)"),
        ({"server": {"prot": 80}},
         "server.prot: Extra inputs are not permitted (got 80). Fix: remove it or fix its spelling"),
        ({"upstreams": {"vllm": {"url": "vllm:8000"}}}, "upstreams.vllm.url: url must be an http:// or https:// URL"),
        ({"models": {"local": {"tier": "small"}}},
         "models.local.cache needs a Redis. Fix: set redis.url, or set models.local.cache.policy: never"),
        ({"redis": {"url": "redis://r:6379"},
          "models": {"local": {"tier": "small", "cache": {"semantic": {"enabled": True}}}}},
         "models.local.cache.semantic.enabled is true but embeddings.url is not set. Fix: set embeddings.url"),
        ({"auth": {"enabled": True}},
         "auth.enabled is true but no key is configured. Fix: add auth.keys or auth.keys_file"),
        ({"auth": {"keys": [{"tenant": "t"}]}},
         "auth.keys.0: api key of tenant 't' needs exactly one of key_sha256 or key "
         "(got neither)"),
        ({"models": {"local": {"tier": "small", "cache": {"policy": "never"}, "complexity": [{"tier": "small"}]}}},
         "models.local.complexity.0: a complexity rule for tier 'small' has no condition. "
         "Fix: set min_prompt_tokens, min_turns or keywords"),
    ],
    ids=["unknown-upstream", "unknown-tier", "bad-literal", "out-of-range", "typo", "bad-url", "cache-without-redis",
         "semantic-without-embeddings", "auth-without-keys", "key-without-secret", "rule-without-condition"],
)  # fmt: skip
def test_config_errors_name_the_key_and_the_fix(change: dict[str, Any], expected: str) -> None:
    message = error_of(minimal(**change))
    assert message.startswith("invalid gateway config (gateway.yaml):")
    assert expected in message


def test_a_plaintext_key_is_never_echoed_in_an_error() -> None:
    data = minimal(auth={"keys": [{"tenant": "t", "key": "sk-very-secret", "key_sha256": "0" * 64}]})
    assert "sk-very-secret" not in error_of(data)


def test_render_yaml_round_trips_for_a_configmap() -> None:
    config = parse_config(
        minimal(
            redis={"url": "redis://cache:6379/0"},
            upstreams={"vllm": {"url": "http://vllm:8000/v1", "api_key": "${VLLM_API_KEY}"}},
            auth={"keys_file": "/etc/inferstack/keys/keys.yaml"},
        ),
        env={"VLLM_API_KEY": "${VLLM_API_KEY}"},
    )
    rendered = render_yaml(config)
    assert "${VLLM_API_KEY}" in rendered
    assert parse_config(yaml.safe_load(rendered), env={"VLLM_API_KEY": "${VLLM_API_KEY}"}) == config


def test_render_yaml_refuses_a_plaintext_secret() -> None:
    config = GatewayConfig.model_validate(
        minimal(upstreams={"vllm": {"url": "http://vllm:8000/v1", "api_key": "sk-plain"}})
    )
    with pytest.raises(ConfigError, match=r"upstreams\.vllm\.api_key: a plaintext secret cannot be rendered"):
        render_yaml(config)


def test_cli_check_validates_and_reports_errors_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    assert main(["--config", str(EXAMPLE), "--check"]) == 0
    broken = tmp_path / "gateway.yaml"
    broken.write_text(yaml.safe_dump(minimal(server={"port": "eighty"})))
    assert main(["--config", str(broken), "--check"]) == 2
    err = capsys.readouterr().err
    assert "server.port: Input should be a valid integer" in err and "Traceback" not in err
    assert main(["--config", str(tmp_path / "missing.yaml"), "--check"]) == 2
    assert "the gateway config: cannot read" in capsys.readouterr().err
    # a file that is not UTF-8, and one that is not YAML: one line each, naming the line
    broken.write_bytes(b"server:\n  host: caf\xe9\n")
    assert main(["--config", str(broken), "--check"]) == 2
    expected = f"the gateway config: {broken} is not UTF-8 text (line 2). Fix: save it as UTF-8\n"
    assert capsys.readouterr().err == expected
    broken.write_text("server: [\n")
    assert main(["--config", str(broken), "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"the gateway config: {broken} is not valid YAML at line 2, column 1: ")
    assert err.count("\n") == 1


def test_the_console_script_module_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "inferstack_gateway", "--config", "/nonexistent.yaml"], capture_output=True, text=True
    )
    assert result.returncode == 2 and "Fix: pass an existing file" in result.stderr
