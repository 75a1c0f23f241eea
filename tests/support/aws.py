"""AWS on loopback: moto in server mode (``ThreadedMotoServer``), which boto3 reaches through
``AWS_ENDPOINT_URL`` exactly as it would reach AWS — no mocks patched into our code."""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import httpx
from moto.server import ThreadedMotoServer

from lib.bundle import PROJECT_ROOT
from lib.queues.transport import sqs_client
from lib.runtime.aws import entry

REGION = "eu-north-1"  # Stockholm, where vercel.json's arn1 runs


@dataclass
class MotoAws:
    endpoint: str

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION)


@contextmanager
def moto_aws(set_env: Callable[..., None]) -> Iterator[MotoAws]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    set_env(
        AWS_ENDPOINT_URL=endpoint,
        AWS_REGION=REGION,
        AWS_DEFAULT_REGION=REGION,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
    )
    sqs_client.cache_clear()
    # An in-process moto server keeps its state in module globals, shared by every server of
    # the process: start each use from an empty account.
    httpx.post(f"{endpoint}/moto-api/reset").raise_for_status()
    try:
        yield MotoAws(endpoint)
    finally:
        sqs_client.cache_clear()
        server.stop()


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """The event Lambda's SQS poller hands the function, from messages SQS returned."""
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": message.get("Attributes", {}),
                "messageAttributes": {},
                "md5OfBody": message["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
            for message in messages
        ]
    }


def receive(sqs: Any, queue_url: str, max_messages: int = 10) -> list[dict[str, Any]]:
    return sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=max_messages, AttributeNames=["All"], WaitTimeSeconds=0
    ).get("Messages", [])


def redrive_policy(sqs: Any, queue_url: str) -> dict[str, Any]:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"])["Attributes"]
    return json.loads(attributes["RedrivePolicy"])


def deploy_stack(aws: MotoAws, template: dict[str, Any], name: str = "ermis", **parameters: str) -> dict[str, str]:
    """Create the stack in moto's CloudFormation (the function package uploaded to moto's S3 first);
    returns its outputs."""
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=f"{name}-code", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket=f"{name}-code", Key="bundle.zip", Body=function_package())
    given = {"CodeBucket": f"{name}-code", "CodeKey": "bundle.zip", **parameters}
    cloudformation = aws.client("cloudformation")
    cloudformation.create_stack(
        StackName=name,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": key, "ParameterValue": value} for key, value in given.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    [stack] = cloudformation.describe_stacks(StackName=name)["Stacks"]
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack
    return {output["OutputKey"]: output["OutputValue"] for output in stack.get("Outputs", [])}


def function_package() -> bytes:
    """The Lambda package's code: api/ and lib/ (the pinned requirements would be added by the
    packaging step; moto stores the archive and does not run it)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder in ("api", "lib"):
            for path in sorted((PROJECT_ROOT / folder).rglob("*.py")):
                archive.write(path, path.relative_to(PROJECT_ROOT).as_posix())
    return buffer.getvalue()


async def invoke_lambda(
    set_env: Callable[..., None], entrypoint: str, event: dict[str, Any], topic: str | None = None
) -> Any:
    """The Lambda runtime's call: the sync handler, on a thread of its own (its own loop)."""
    set_env(ERMIS_AWS_ENTRYPOINT=entrypoint, ERMIS_AWS_QUEUE_TOPIC=topic)
    return await asyncio.to_thread(entry.handler, event, None)
