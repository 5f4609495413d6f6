"""S3 credentials from prefect-aws blocks, for a run's sources and workspace.

The block tests run against an S3 server that checks credentials (tests/fixtures/s3_auth.py:
moto with IAM auth on). The process environment points at the suite's other S3 server
with keys that server accepts and this one refuses, so a run that succeeds here read
and wrote with the block's keys and the block's endpoint, never the environment's.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from prefect.blocks.system import Secret
from prefect_aws.client_parameters import AwsClientParameters
from prefect_aws.credentials import AwsCredentials, MinIOCredentials
from prefect_aws.s3 import S3Bucket
from pydantic import SecretStr

from pagegate import samples
from pagegate.io.s3 import S3Credentials, make_s3_client
from pagegate.tasks.aws_credentials import block_reference, s3_credentials_of
from tests.fixtures.s3_auth import AuthS3, s3_auth_client
from tests.helpers import REPO, cli_env, read_ledger, run_flow


def aws_block(server: AuthS3, user: str, **extra: Any) -> AwsCredentials:
    key = server.keys[user]
    return AwsCredentials(
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=SecretStr(key.secret_access_key),
        region_name="us-east-1",
        aws_client_parameters=AwsClientParameters(endpoint_url=server.endpoint_url),
        **extra,
    )


# ------------------------------------------------------------------ the mapping (no I/O)


def test_a_bare_name_is_an_aws_credentials_block_and_a_typed_one_is_kept() -> None:
    assert block_reference(" ops ") == "aws-credentials/ops"
    assert block_reference("s3-bucket/ocr-in") == "s3-bucket/ocr-in"
    with pytest.raises(ValueError, match="empty"):
        block_reference("  ")


def test_each_block_kind_gives_plain_credentials_and_secrets_stay_out_of_the_repr() -> None:
    aws = AwsCredentials(
        aws_access_key_id="AKIA1", aws_secret_access_key=SecretStr("s3cret"),
        aws_session_token="tok", region_name="eu-west-1", profile_name=None,
        aws_client_parameters=AwsClientParameters(endpoint_url="http://s3.local:9000"),
    )
    creds = s3_credentials_of(aws)
    assert creds == S3Credentials("AKIA1", "s3cret", "tok", "eu-west-1", "http://s3.local:9000")
    assert "s3cret" not in repr(creds) and "tok" not in repr(creds)

    minio = MinIOCredentials(minio_root_user="root", minio_root_password=SecretStr("pw"),
                             region_name="us-east-1")
    bucket = S3Bucket(bucket_name="ocr", credentials=minio)
    assert s3_credentials_of(bucket) == S3Credentials("root", "pw", region="us-east-1")
    assert s3_credentials_of(AwsCredentials(profile_name="ops")) == S3Credentials(profile="ops")


def test_blocks_that_cannot_give_lasting_s3_credentials_are_refused() -> None:
    with pytest.raises(ValueError, match="assume_role_arn"):
        s3_credentials_of(AwsCredentials(assume_role_arn="arn:aws:iam::1:role/r"))
    with pytest.raises(ValueError, match="secret block holds no S3 credentials"):
        s3_credentials_of(Secret(value=SecretStr("x")))
    with pytest.raises(ValueError, match="both"):
        S3Credentials(access_key_id="AKIA1")


# ------------------------------------------------------------------ against the S3 server


@pytest.fixture
def seeded(s3_auth: AuthS3, s3_env: str, s3_bucket: str) -> tuple[AuthS3, str]:
    """Two PDFs in a bucket of the checking server, named like the suite's bucket."""
    admin = s3_auth_client(s3_auth, "admin")
    admin.create_bucket(Bucket=s3_bucket)
    for i in range(2):
        admin.put_object(Bucket=s3_bucket, Key=f"in/d{i}.pdf",
                         Body=samples.text_pdf(2, title=f"D{i}", seed=i))
    return s3_auth, s3_bucket


@pytest.mark.slow
def test_the_environments_keys_are_refused_by_the_checking_server(
    seeded: tuple[AuthS3, str],
) -> None:
    server, bucket = seeded
    client = make_s3_client(credentials=S3Credentials(endpoint_url=server.endpoint_url))
    with pytest.raises(ClientError) as refused:
        client.list_objects_v2(Bucket=bucket)
    assert refused.value.response["Error"]["Code"] == "InvalidAccessKeyId"


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_a_run_reads_and_writes_s3_with_only_the_blocks_credentials(
    seeded: tuple[AuthS3, str], start_sim: Any,
) -> None:
    server, bucket = seeded
    aws_block(server, "ocr").save("pg-ocr-keys", overwrite=True)
    sim = start_sim(profile="ci")
    proc = subprocess.run(
        [sys.executable, "-m", "pagegate.cli", "run", f"s3://{bucket}/in/",
         "--workspace", f"s3://{bucket}/out", "--server", sim.base_url,
         "--aws-credentials", "pg-ocr-keys", "--json"],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert (summary["pdfs_ok"], summary["pdfs_failed"], summary["pages"]) == (2, 0, 4)
    keys = {o["Key"] for o in s3_auth_client(server, "admin")
            .list_objects_v2(Bucket=bucket, Prefix="out/")["Contents"]}
    assert sum(k.startswith("out/results/") for k in keys) == 2
    assert any(k.endswith("/run.json") for k in keys) and any(k.endswith("/chart.png") for k in keys)


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_a_block_that_may_not_read_fails_the_pdfs_with_s3s_code_and_reprocess_takes_a_block(
    seeded: tuple[AuthS3, str], start_sim: Any, tmp_path: Path,
) -> None:
    """An S3Bucket block's credentials may list the bucket but not read it: each PDF is
    recorded as download_failed with S3's AccessDenied; reprocess with a block that may
    read redoes them from the ledger."""
    server, bucket = seeded
    S3Bucket(bucket_name=bucket, credentials=aws_block(server, "lister")).save(
        "pg-lister", overwrite=True)
    aws_block(server, "ocr").save("pg-ocr-keys", overwrite=True)
    sim = start_sim(profile="ci")
    workspace = tmp_path / "ws"

    state, data = run_flow(sources=[f"s3://{bucket}/in/"], workspace=str(workspace),
                           server_url=sim.base_url, aws_credentials="s3-bucket/pg-lister")

    assert state.is_failed()
    assert {f["reason"] for f in data["failed"]} == {"download_failed"}
    ledger = read_ledger(workspace)
    assert set(ledger) == {f"s3://{bucket}/in/d{i}.pdf" for i in range(2)}
    assert all(rec["extra"]["s3_code"] == "AccessDenied" and "AccessDenied" in rec["detail"]
               for rec in ledger.values()), ledger

    from pagegate.flows.reprocess import reprocess

    redo: Any = reprocess(workspace=str(workspace), server_url=sim.base_url,
                          aws_credentials="pg-ocr-keys", return_state=True)
    again = asyncio.run(redo)
    assert again.is_completed(), again.message
    assert read_ledger(workspace) == {}
    assert len(list((workspace / "results").glob("*.jsonl"))) == 2
