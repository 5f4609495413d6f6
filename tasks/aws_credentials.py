"""S3 credentials from a prefect-aws block, for a run's sources and workspace.

Prefect users keep S3 credentials in prefect-aws blocks (`AwsCredentials`, or an
`S3Bucket` that holds them), shared by deployments and workers; a deployment on a
shared worker names its own instead of relying on the worker's environment. Here a
block named by the run (`aws_credentials`, `--aws-credentials`) is read into plain
`S3Credentials` (pagegate.io.s3), which the library turns into its boto3 client with
its usual retries: pagegate.io never imports Prefect.

Names: `NAME` is an AwsCredentials block; `TYPE/NAME` is any of `aws-credentials/NAME`,
`s3-bucket/NAME` (its credentials, and its endpoint) or `minio-credentials/NAME`.
An AwsCredentials block with `assume_role_arn` is refused: role credentials expire within
hours, and a run can last longer than that.
"""

from __future__ import annotations

from typing import Any

from pagegate.io.s3 import S3Credentials

DEFAULT_BLOCK_TYPE = "aws-credentials"


def block_reference(name: str) -> str:
    """`TYPE/NAME` for Prefect's Block.load; a bare name is an AwsCredentials block."""
    name = name.strip()
    if not name:
        raise ValueError("aws_credentials: empty block name")
    return name if "/" in name else f"{DEFAULT_BLOCK_TYPE}/{name}"


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    getter = getattr(value, "get_secret_value", None)
    return str(getter() if callable(getter) else value)


def _endpoint(block: Any) -> str | None:
    params = getattr(block, "aws_client_parameters", None)
    url = getattr(params, "endpoint_url", None)
    return str(url) if url else None


def s3_credentials_of(block: Any) -> S3Credentials:
    """Plain credentials from an AwsCredentials, MinIOCredentials or S3Bucket block.

    No I/O: the block is already loaded. Raises ValueError for a block that cannot
    give S3 credentials (another type, or an assumed role).
    """
    from prefect_aws.credentials import AwsCredentials, MinIOCredentials
    from prefect_aws.s3 import S3Bucket

    if isinstance(block, S3Bucket):
        return s3_credentials_of(block.credentials)
    if isinstance(block, AwsCredentials):
        if block.assume_role_arn:
            raise ValueError(
                "aws_credentials: an AwsCredentials block with assume_role_arn is not "
                "supported (role credentials expire during long runs); give it keys or a "
                "profile_name"
            )
        return S3Credentials(
            access_key_id=block.aws_access_key_id,
            secret_access_key=_secret(block.aws_secret_access_key),
            session_token=block.aws_session_token,
            region=block.region_name,
            endpoint_url=_endpoint(block),
            profile=block.profile_name,
        )
    if isinstance(block, MinIOCredentials):
        return S3Credentials(
            access_key_id=block.minio_root_user,
            secret_access_key=_secret(block.minio_root_password),
            region=block.region_name,
            endpoint_url=_endpoint(block),
        )
    kind = getattr(block, "get_block_type_slug", lambda: type(block).__name__)()
    raise ValueError(
        f"aws_credentials: a {kind} block holds no S3 credentials "
        "(use aws-credentials/NAME, s3-bucket/NAME or minio-credentials/NAME)"
    )


async def load_s3_credentials(name: str | None) -> S3Credentials | None:
    """The named block's S3 credentials; None (the AWS environment) when no name is given."""
    if name is None or not name.strip():
        return None
    import prefect_aws  # noqa: F401  # registers its block types for Block.aload
    from prefect.blocks.core import Block

    from pagegate.tasks.preflight import named_block

    with named_block("prefect-aws", name, "--aws-credentials"):
        block = await Block.aload(block_reference(name))
    return s3_credentials_of(block)
