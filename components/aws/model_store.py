"""ModelStore: the S3 bucket for weights and engines, and ECR repositories for the kit's images."""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
from pydantic import Field

from components.specs import Args, ModelStoreSpec


class ModelStoreArgs(Args):
    spec: ModelStoreSpec = ModelStoreSpec()
    repository_prefix: str
    """Required: ECR names are unique per account and region, so each stack prefixes its own."""
    tags: dict[str, str] = Field(default_factory=dict)


def read_policy(bucket_arn: pulumi.Input[str], key_arn: pulumi.Input[str]) -> pulumi.Output[str]:
    """Read-only access to the bucket: what the model loader on a node needs, nothing more."""
    return pulumi.Output.all(bucket_arn, key_arn).apply(
        lambda a: json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [a[0]]},
                    {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"{a[0]}/*"]},
                    {"Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": [a[1]]},
                ],
            }
        )
    )


def engine_build_policy(bucket_arn: pulumi.Input[str], key_arn: pulumi.Input[str]) -> pulumi.Output[str]:
    """The engine-build Job: read checkpoints (``<model>/hf/``), write engines (``<model>/trtllm/``), nothing else.

    ``kms:GenerateDataKey`` encrypts what it uploads under the bucket's SSE-KMS key (S3 user guide, "Using
    server-side encryption with AWS KMS keys": PutObject needs it, multipart uploads need Decrypt too).
    """
    return pulumi.Output.all(bucket_arn, key_arn).apply(
        lambda a: json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [a[0]]},
                    {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"{a[0]}/*/hf/*"]},
                    {
                        "Effect": "Allow",
                        "Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
                        "Resource": [f"{a[0]}/*/trtllm/*"],
                    },
                    {"Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Resource": [a[1]]},
                ],
            }
        )
    )


class ModelStore(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    key_arn: pulumi.Output[str]
    repository_urls: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: ModelStoreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws_model_store:ModelStore", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spec = args.spec
        key = aws.kms.Key(
            name,
            description=f"Model store encryption for {name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, protect=spec.protect),
        )
        bucket = aws.s3.Bucket(
            name,
            force_destroy=spec.force_destroy,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, protect=spec.protect),
        )
        aws.s3.BucketOwnershipControls(
            name, bucket=bucket.id, rule={"object_ownership": "BucketOwnerEnforced"}, opts=child
        )
        aws.s3.BucketPublicAccessBlock(
            name,
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketVersioning(name, bucket=bucket.id, versioning_configuration={"status": "Enabled"}, opts=child)
        aws.s3.BucketServerSideEncryptionConfiguration(
            name,
            bucket=bucket.id,
            rules=[
                {
                    "apply_server_side_encryption_by_default": {
                        "sse_algorithm": "aws:kms",
                        "kms_master_key_id": key.arn,
                    },
                    # Bucket keys cut KMS requests per object: loaders read thousands of shards.
                    "bucket_key_enabled": True,
                }
            ],
            opts=child,
        )
        aws.s3.BucketPolicy(
            name,
            bucket=bucket.id,
            policy=bucket.arn.apply(
                lambda arn: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Sid": "DenyInsecureTransport",
                                "Effect": "Deny",
                                "Principal": "*",
                                "Action": "s3:*",
                                "Resource": [arn, f"{arn}/*"],
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        ],
                    }
                )
            ),
            opts=child,
        )

        self.repository_urls = {}
        for repo in spec.image_repositories:
            repository = aws.ecr.Repository(
                f"{name}-{repo}",
                name=f"{args.repository_prefix}/{repo}",
                image_tag_mutability="IMMUTABLE",
                image_scanning_configuration={"scan_on_push": True},
                encryption_configurations=[{"encryption_type": "KMS", "kms_key": key.arn}],
                force_delete=spec.force_destroy,
                tags=args.tags,
                opts=child,
            )
            self.repository_urls[repo] = repository.repository_url

        self.bucket_name = bucket.bucket
        self.bucket_arn = bucket.arn
        self.key_arn = key.arn
        self.register_outputs(
            {"bucket_name": self.bucket_name, "bucket_arn": self.bucket_arn, "repository_urls": self.repository_urls}
        )
