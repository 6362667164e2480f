"""Moved to ``components.store.s3_compatible_store`` (the edge tier reads the same kind of store); kept so
existing imports work. The type token and logical names are unchanged."""

from components.store.s3_compatible_store import (
    SECRET_NAME,
    S3CompatibleStore,
    S3CompatibleStoreArgs,
    loader_env,
)

__all__ = ["SECRET_NAME", "S3CompatibleStore", "S3CompatibleStoreArgs", "loader_env"]
