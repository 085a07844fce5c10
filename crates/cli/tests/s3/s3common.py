"""What the gateway's feature scripts share: a boto3 client for the gateway under test (from
S3_ENDPOINT, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; path-style, SigV4, no retries), and
the check, step and error-code helpers. Imported by the scripts beside it."""

import os
import sys
import time

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["S3_ENDPOINT"]
AK = os.environ["AWS_ACCESS_KEY_ID"]
SK = os.environ["AWS_SECRET_ACCESS_KEY"]


def client(endpoint=None, **config):
    """A boto3 S3 client of the gateway (or of `endpoint`); `config` adds botocore Config
    settings."""
    s3 = config.pop("s3", {"addressing_style": "path"})
    return boto3.client(
        "s3",
        endpoint_url=endpoint or ENDPOINT,
        aws_access_key_id=AK,
        aws_secret_access_key=SK,
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3=s3,
                      retries={"max_attempts": 1, "mode": "standard"}, **config),
    )


def check(cond, msg):
    """Stops the script with FAILED and `msg` unless `cond` holds."""
    if not cond:
        print("FAILED:", msg, flush=True)
        sys.exit(1)


def step(name):
    print("==", name, flush=True)


def error_of(fn, **kwargs):
    """(S3 error code, HTTP status) a call fails with; (None, 200) on success."""
    try:
        fn(**kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    return None, 200


def code_of(fn, **kwargs):
    """The S3 error code a call fails with (None on success)."""
    return error_of(fn, **kwargs)[0]


def empty_bucket(s3, bucket):
    """Removes every version, delete marker and object of `bucket`, then the bucket."""
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
            s3.delete_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
    s3.delete_bucket(Bucket=bucket)


def wait_for(what, cond, secs=30):
    """Polls `cond` every quarter second until it holds; fails with `what` after `secs`."""
    deadline = time.time() + secs
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.25)
    check(False, f"{what} within {secs} s")
