"""AWS on loopback: moto in server mode (``ThreadedMotoServer``), which boto3 reaches through
``AWS_ENDPOINT_URL`` exactly as it would reach AWS — no mocks patched into our code."""

from __future__ import annotations

import asyncio
import io
import json
import re
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
from lib.runtime.aws.secrets import SECRET_VARIABLES

REGION = "eu-north-1"  # Stockholm, where vercel.json's arn1 runs
# moto's CloudFormation cannot evaluate ``Fn::GetAtt`` of the distribution, which it does not
# create, so every stack here names the site's own domain (the template's other branch).
SITE_DOMAIN = "news.example.com"
SITE_CERTIFICATE = "arn:aws:acm:us-east-1:123456789012:certificate/news-example-com"


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


# The stack's secret: a value for every variable, each one recognisable wherever it turns up.
STACK_SECRETS = {name: f"value-of-{name.lower()}-9c4e1f07" for name in SECRET_VARIABLES}
ORIGIN_SECRET = "origin-secret-for-tests-0123456789abcdef"  # the 32 characters and more the template asks


def create_stack_secret(aws: MotoAws, values: dict[str, str] = STACK_SECRETS, name: str = "ermis") -> str:
    """The Secrets Manager secret the template's ``SecretArn`` names, in moto; returns its ARN."""
    return aws.client("secretsmanager").create_secret(Name=f"{name}/functions", SecretString=json.dumps(values))["ARN"]


def deploy_stack(aws: MotoAws, template: dict[str, Any], name: str = "ermis", **parameters: str) -> dict[str, str]:
    """Create the stack in moto's CloudFormation (the function package uploaded to moto's S3, and
    the stack's secret to its Secrets Manager, first); returns its outputs."""
    if "SecretArn" not in parameters:
        parameters["SecretArn"] = create_stack_secret(aws, name=name)
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=f"{name}-code", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket=f"{name}-code", Key="bundle.zip", Body=function_package())
    given = stack_parameters(name, parameters)
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


def stack_parameters(name: str, parameters: dict[str, str]) -> dict[str, str]:
    """What ``deploy_stack`` gives the stack: the package's place, the site's domain, and ``parameters``."""
    site = {"SiteDomainName": SITE_DOMAIN, "SiteCertificateArn": SITE_CERTIFICATE}
    return {
        "CodeBucket": f"{name}-code",
        "CodeKey": "bundle.zip",
        "StreamsOriginSecret": ORIGIN_SECRET,
        **site,
        **parameters,
    }


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


NO_VALUE = object()  # ``{"Ref": "AWS::NoValue"}``: the property is left out


@dataclass
class StackValues:
    """What a deployed stack's intrinsic functions evaluate to — ``Ref`` (parameters and the stack's
    physical ids), ``Fn::GetAtt``, ``Fn::Sub``, ``Fn::Join``, ``Fn::If`` and its conditions — for the
    resources moto's CloudFormation does not create, which the tests create through moto's APIs
    from the template's own properties."""

    refs: dict[str, Any]
    attributes: dict[str, dict[str, Any]]
    conditions: dict[str, bool]

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [resolved for item in value if (resolved := self.resolve(item)) is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            [(function, argument)] = value.items()
            if function == "Ref":
                return NO_VALUE if argument == "AWS::NoValue" else self.refs[argument]
            if function == "Fn::GetAtt":
                return self.attributes[argument[0]][argument[1]]
            if function == "Fn::If":
                condition, if_true, if_false = argument
                return self.resolve(if_true if self.conditions[condition] else if_false)
            if function == "Fn::Join":
                separator, items = argument
                return separator.join(str(item) for item in self.resolve(items))
            if function == "Fn::Sub":
                return re.sub(r"\$\{([^}]+)\}", lambda match: str(self._named(match.group(1))), argument)
            if function == "Fn::Equals":
                left, right = self.resolve(argument)
                return left == right
            if function == "Fn::Not":
                return not self.resolve(argument[0])
            if function == "Fn::EachMemberEquals":
                items, expected = self.resolve(argument)
                return all(item == expected for item in items)
        return {key: resolved for key, item in value.items() if (resolved := self.resolve(item)) is not NO_VALUE}

    def _named(self, name: str) -> Any:
        resource, _, attribute = name.partition(".")
        return self.attributes[resource][attribute] if attribute else self.refs[name]


def template_values(template: dict[str, Any], parameters: dict[str, Any], name: str = "ermis") -> StackValues:
    """The template's parameters (given, else their defaults) and conditions, before any resource."""
    refs: dict[str, Any] = {"AWS::StackName": name, "AWS::Region": REGION}
    for parameter, spec in template["Parameters"].items():
        raw = parameters.get(parameter, spec.get("Default", ""))
        kind = spec["Type"]
        refs[parameter] = str(raw).split(",") if kind == "CommaDelimitedList" else int(raw) if kind == "Number" else raw
    values = StackValues(refs, {}, {})
    values.conditions.update({condition: values.resolve(body) for condition, body in template["Conditions"].items()})
    return values


def stack_values(
    aws: MotoAws, template: dict[str, Any], parameters: dict[str, str], name: str = "ermis"
) -> StackValues:
    """The values of the stack ``deploy_stack`` created with ``parameters``, its ``Fn::GetAtt``
    values read back from moto's APIs."""
    given = {"SecretArn": aws.client("secretsmanager").describe_secret(SecretId=f"{name}/functions")["ARN"]}
    values = template_values(template, stack_parameters(name, {**given, **parameters}), name)
    listed = aws.client("cloudformation").list_stack_resources(StackName=name)["StackResourceSummaries"]
    physical = {
        item["LogicalResourceId"]: item["PhysicalResourceId"]
        for item in listed
        if item.get("LogicalResourceId") in template["Resources"] and "PhysicalResourceId" in item
    }
    values.refs |= physical
    values.attributes |= _attributes(aws, template, physical)
    return values


def _attributes(aws: MotoAws, template: dict[str, Any], physical: dict[str, str]) -> dict[str, dict[str, Any]]:
    arns = {fn["FunctionName"]: fn["FunctionArn"] for fn in aws.client("lambda").list_functions()["Functions"]}
    arns |= {role["RoleName"]: role["Arn"] for role in aws.client("iam").list_roles()["Roles"]}
    balancers = aws.client("elbv2").describe_load_balancers()["LoadBalancers"]
    dns_names = {balancer["LoadBalancerArn"]: balancer["DNSName"] for balancer in balancers}
    attributes: dict[str, dict[str, Any]] = {}
    for logical, resource_id in physical.items():
        kind = template["Resources"][logical]["Type"]
        if kind in ("AWS::Lambda::Function", "AWS::IAM::Role"):
            attributes[logical] = {"Arn": arns[resource_id]}
        elif kind == "AWS::ElasticLoadBalancingV2::LoadBalancer":
            attributes[logical] = {
                "DNSName": dns_names[resource_id],
                "LoadBalancerFullName": resource_id.split(":loadbalancer/", 1)[1],
            }
        elif kind == "AWS::ElasticLoadBalancingV2::TargetGroup":
            attributes[logical] = {"TargetGroupFullName": resource_id.rsplit(":", 1)[1]}
    return attributes
