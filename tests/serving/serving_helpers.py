"""Helpers the serving tests share (a plain module: conftest names are not importable safely)."""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2


def parse_model_config(text: str) -> model_config_pb2.ModelConfig:
    """Parse with Triton's own proto; unknown fields and type errors raise ParseError."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def canonical_model_config(text: str) -> str:
    """The config as protobuf prints it: comments and layout gone, maps sorted by key."""
    return text_format.MessageToString(parse_model_config(text))
