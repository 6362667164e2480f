"""Tier-neutral model stores that live in the cluster (an S3-compatible endpoint and its credentials)."""
