"""``scripts/aws-template``: the AWS CloudFormation template of the bundle, derived from
``vercel.json`` and the ``api/`` tree — one source of truth, so a cron or a queue trigger added
to ``vercel.json`` (or a file added under ``api/``) appears here with no other edit.

What it declares:

- **a Lambda function per ``api/`` file** (Python 3.12, handler ``lib.runtime.aws.entry.handler``,
  ``ERMIS_AWS_ENTRYPOINT`` naming the file; timeout = the file's ``maxDuration``, else
  ``DEFAULT_TIMEOUT_S``), except the SSE streams (``events.py``): Lambda buffers a Python
  response, so their home is an ECS service of the ``Dockerfile``'s image
  (``lib.ops.aws_streams``: why, its load balancer, shutdown and scaling);
- **an HTTP API** (API Gateway v2) with a route per function (``ANY /api/stories/{storyId}``), the
  Lambda proxy integration (payload 2.0) and the permission for API Gateway to invoke it; the
  queue consumers get no route — SQS invokes them;
- **an SQS queue and its DLQ queue per ``queue/v2beta`` topic**: visibility timeout 300 s (the
  consumer's lease), redrive policy ``maxReceiveCount: 5``, and the event source mapping to the
  consumer function with ``ReportBatchItemFailures`` (batch size 10);
- **an EventBridge Scheduler schedule per cron**: the same expression in AWS's six-field form,
  time zone UTC, invoking the cron's function directly with ``{"ermisCron": path}`` through a
  role only the scheduler can assume (``lib.runtime.aws.scheduler``);
- **a CloudFront distribution**, the one origin browsers use: the HTTP API by default, and a
  behaviour per stream route to the streams' load balancer (``lib.ops.aws_streams``);
- the two roles; and **the secrets by reference**: the ``SecretArn`` parameter names one
  Secrets Manager secret holding them as a JSON object (``lib.runtime.aws.secrets``); each
  Lambda gets that ARN (``ERMIS_SECRET_ARN``) and reads the values at its cold start, the
  streams' task gets them through ``Secrets``/``ValueFrom``, and no value is in any
  ``Environment`` (``lambda:GetFunctionConfiguration`` and ``ecs:DescribeTaskDefinition`` show
  none). Both targets run with ``ERMIS_ENV=production`` and ``CLERK_AUTHORIZED_PARTIES`` (the
  ``ClerkAuthorizedParties`` parameter, else the site's origin), so a process refuses to start
  without what production needs (``lib.settings.PRODUCTION_REQUIRED``).

Every ``api/`` file has one home: a stream in the ECS service, a consumer behind its queue,
every other file behind its HTTP API route.

Every function gets ``ERMIS_QUEUE_TRANSPORT=sqs`` and each topic's ``ERMIS_SQS_QUEUE_URL_<TOPIC>``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from lib.bundle import PROJECT_ROOT, read_vercel_config
from lib.jobs.schedule import load_crons
from lib.local.routing import discover_routes
from lib.ops import aws_streams
from lib.ops.aws_streams import assume_role_policy, is_stream, site_origin
from lib.runtime.aws.secrets import SECRET_ARN_VARIABLE, SECRET_VARIABLES
from lib.settings import Settings

RUNTIME = "python3.12"
HANDLER = "lib.runtime.aws.entry.handler"
DEFAULT_TIMEOUT_S = 60
MEMORY_MB = 1024
QUEUE_VISIBILITY_TIMEOUT_S = 300
MAX_RECEIVE_COUNT = 5
SQS_BATCH_SIZE = 10
DLQ_RETENTION_S = 14 * 24 * 3600
SECRET_ARN_PATTERN = r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$"  # noqa: S105
CLERK_PARTIES_GIVEN = "ClerkPartiesGiven"
# The streams' plain environment (their secrets: STREAM_SECRET_VARIABLES); nothing else of the functions'.
STREAM_VARIABLES = ("ERMIS_ENV", "ERMIS_ALLOWED_ORIGINS", "CLERK_AUTHORIZED_PARTIES")


def logical_id(text: str, suffix: str) -> str:
    """``api/stories/[storyId]/events.py`` → ``ApiStoriesStoryIdEvents`` + suffix."""
    words = re.split(r"[^A-Za-z0-9]+", text.removesuffix(".py"))
    return "".join(word[:1].upper() + word[1:] for word in words if word) + suffix


def aws_cron_expression(schedule: str) -> str:
    """A five-field UTC cron (``vercel.json``) as EventBridge's ``cron(min hour dom month dow
    year)``: one of day-of-month and day-of-week must be ``?``, and AWS numbers the days of the
    week 1-7 from Sunday where cron numbers them 0-6."""
    minute, hour, day_of_month, month, day_of_week = schedule.split()
    if day_of_week == "*":
        day_of_week = "?"
    elif day_of_month == "*":
        day_of_month = "?"
        day_of_week = re.sub(r"\d+", lambda match: str(int(match.group()) % 7 + 1), day_of_week)
    else:
        raise ValueError(f"{schedule!r}: EventBridge cannot restrict both day of month and day of week")
    return f"cron({minute} {hour} {day_of_month} {month} {day_of_week} *)"


def _queue_triggers(config: dict[str, Any]) -> dict[str, str]:
    """api file → the wire topic it consumes."""
    return {
        file: trigger["topic"]
        for file, settings in config.get("functions", {}).items()
        for trigger in settings.get("experimentalTriggers", [])
        if trigger.get("type") == "queue/v2beta"
    }


def build_template(project_root: Path = PROJECT_ROOT) -> dict[str, Any]:
    config = read_vercel_config(project_root)
    consumers = _queue_triggers(config)
    topics = sorted(set(consumers.values()))
    parameters: dict[str, Any] = {
        "CodeBucket": {"Type": "String", "Description": "S3 bucket holding the function package"},
        "CodeKey": {"Type": "String", "Description": "S3 key of the package (see README: Deploying to AWS)"},
        "QueueConsumersEnabled": {"Type": "String", "AllowedValues": ["true", "false"], "Default": "true"},
        "SecretArn": {
            "Type": "String",
            "AllowedPattern": SECRET_ARN_PATTERN,
            "ConstraintDescription": "the full ARN of a Secrets Manager secret",
            "Description": "the Secrets Manager secret whose value is a JSON object of "
            + ", ".join(SECRET_VARIABLES)
            + " (every one; an optional one as an empty string)",
        },
        "ClerkAuthorizedParties": {
            "Type": "String",
            "Default": "",
            "Description": "CLERK_AUTHORIZED_PARTIES: the origins whose session tokens are accepted"
            " (comma-separated); empty: the site's origin",
        },
        **aws_streams.PARAMETERS,
    }
    resources: dict[str, Any] = {}
    queue_ids = {topic: logical_id(topic, "Queue") for topic in topics}
    for topic in topics:
        dlq = logical_id(topic, "DeadLetterQueue")
        resources[dlq] = {
            "Type": "AWS::SQS::Queue",
            "Properties": {
                "QueueName": {"Fn::Sub": f"${{AWS::StackName}}-{topic}-dlq"},
                "MessageRetentionPeriod": DLQ_RETENTION_S,
            },
        }
        resources[queue_ids[topic]] = {
            "Type": "AWS::SQS::Queue",
            "Properties": {
                "QueueName": {"Fn::Sub": f"${{AWS::StackName}}-{topic}"},
                "VisibilityTimeout": QUEUE_VISIBILITY_TIMEOUT_S,
                "RedrivePolicy": {
                    "deadLetterTargetArn": {"Fn::GetAtt": [dlq, "Arn"]},
                    "maxReceiveCount": MAX_RECEIVE_COUNT,
                },
            },
        }
    resources["FunctionRole"] = _function_role(queue_ids)
    crons = load_crons(project_root)
    cron_function_ids = [logical_id(f"api{entry.path.removeprefix('/api')}", "Function") for entry in crons]
    resources["SchedulerRole"] = _scheduler_role(cron_function_ids)
    resources["HttpApi"] = {
        "Type": "AWS::ApiGatewayV2::Api",
        "Properties": {"Name": {"Ref": "AWS::StackName"}, "ProtocolType": "HTTP"},
    }
    resources["HttpApiStage"] = {
        "Type": "AWS::ApiGatewayV2::Stage",
        "Properties": {"ApiId": {"Ref": "HttpApi"}, "StageName": "$default", "AutoDeploy": True},
    }
    environment = {
        "ERMIS_ENV": "production",
        "ERMIS_QUEUE_TRANSPORT": "sqs",
        **{Settings.sqs_queue_url_variable(topic): {"Ref": queue_ids[topic]} for topic in topics},
        SECRET_ARN_VARIABLE: {"Ref": "SecretArn"},
        "ERMIS_ALLOWED_ORIGINS": site_origin(),
        "CLERK_AUTHORIZED_PARTIES": {"Fn::If": [CLERK_PARTIES_GIVEN, {"Ref": "ClerkAuthorizedParties"}, site_origin()]},
    }
    routes = sorted(discover_routes(project_root), key=lambda r: r.file)
    stream_routes = [route for route in routes if is_stream(route)]
    streams_environment = {name: environment[name] for name in STREAM_VARIABLES}
    resources.update(aws_streams.streams_resources(streams_environment, stream_routes))
    resources["EdgeDistribution"] = aws_streams.edge_distribution(stream_routes)
    resources[aws_streams.EDGE_RESPONSE_HEADERS] = aws_streams.edge_response_headers()
    functions = config.get("functions", {})
    for route in routes:
        if is_stream(route):
            continue
        function_id = logical_id(route.file, "Function")
        variables = {**environment, "ERMIS_AWS_ENTRYPOINT": route.file}
        if route.file in consumers:
            variables["ERMIS_AWS_QUEUE_TOPIC"] = consumers[route.file]
        resources[function_id] = {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "Runtime": RUNTIME,
                "Handler": HANDLER,
                "Code": {"S3Bucket": {"Ref": "CodeBucket"}, "S3Key": {"Ref": "CodeKey"}},
                "Role": {"Fn::GetAtt": ["FunctionRole", "Arn"]},
                "Timeout": functions.get(route.file, {}).get("maxDuration", DEFAULT_TIMEOUT_S),
                "MemorySize": MEMORY_MB,
                "Environment": {"Variables": variables},
            },
        }
        if route.file in consumers:
            resources[logical_id(route.file, "EventSourceMapping")] = {
                "Type": "AWS::Lambda::EventSourceMapping",
                "Properties": {
                    "EventSourceArn": {"Fn::GetAtt": [queue_ids[consumers[route.file]], "Arn"]},
                    "FunctionName": {"Ref": function_id},
                    "BatchSize": SQS_BATCH_SIZE,
                    "FunctionResponseTypes": ["ReportBatchItemFailures"],
                    "Enabled": {"Fn::If": ["QueueConsumersOn", True, False]},
                },
            }
            continue
        resources.update(_http_route(route.file, route.pattern, function_id))
    seen: dict[str, int] = {}
    for entry, function_id in zip(crons, cron_function_ids, strict=True):
        # A path may be scheduled twice (two expressions): the second is "<name>-2".
        seen[entry.name] = seen.get(entry.name, 0) + 1
        name = entry.name if seen[entry.name] == 1 else f"{entry.name}-{seen[entry.name]}"
        resources[logical_id(name, "Schedule")] = {
            "Type": "AWS::Scheduler::Schedule",
            "Properties": {
                "Name": {"Fn::Sub": f"${{AWS::StackName}}-{name}"},
                "ScheduleExpression": aws_cron_expression(entry.schedule),
                "ScheduleExpressionTimezone": "UTC",
                "FlexibleTimeWindow": {"Mode": "OFF"},
                "Target": {
                    "Arn": {"Fn::GetAtt": [function_id, "Arn"]},
                    "RoleArn": {"Fn::GetAtt": ["SchedulerRole", "Arn"]},
                    "Input": json.dumps({"ermisCron": entry.path}),
                },
            },
        }
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "ErmisAI functions on AWS, derived from vercel.json by scripts/aws-template",
        "Parameters": parameters,
        "Conditions": {
            "QueueConsumersOn": {"Fn::Equals": [{"Ref": "QueueConsumersEnabled"}, "true"]},
            CLERK_PARTIES_GIVEN: {"Fn::Not": [{"Fn::Equals": [{"Ref": "ClerkAuthorizedParties"}, ""]}]},
            **aws_streams.CONDITIONS,
        },
        "Rules": aws_streams.RULES,
        "Resources": resources,
        "Outputs": {
            "HttpApiUrl": {"Value": {"Fn::Sub": "https://${HttpApi}.execute-api.${AWS::Region}.amazonaws.com"}},
            "SiteUrl": {"Value": site_origin()},
            **{f"{queue_ids[topic]}Url": {"Value": {"Ref": queue_ids[topic]}} for topic in topics},
        },
    }


def _http_route(file: str, pattern: str, function_id: str) -> dict[str, Any]:
    integration = logical_id(file, "Integration")
    return {
        integration: {
            "Type": "AWS::ApiGatewayV2::Integration",
            "Properties": {
                "ApiId": {"Ref": "HttpApi"},
                "IntegrationType": "AWS_PROXY",
                "IntegrationUri": {"Fn::GetAtt": [function_id, "Arn"]},
                "PayloadFormatVersion": "2.0",
            },
        },
        logical_id(file, "Route"): {
            "Type": "AWS::ApiGatewayV2::Route",
            "Properties": {
                "ApiId": {"Ref": "HttpApi"},
                "RouteKey": f"ANY {pattern}",
                "Target": {"Fn::Join": ["/", ["integrations", {"Ref": integration}]]},
            },
        },
        logical_id(file, "Permission"): {
            "Type": "AWS::Lambda::Permission",
            "Properties": {
                "Action": "lambda:InvokeFunction",
                "FunctionName": {"Ref": function_id},
                "Principal": "apigateway.amazonaws.com",
            },
        },
    }


def _function_role(queue_ids: dict[str, str]) -> dict[str, Any]:
    queues = [{"Fn::GetAtt": [queue_id, "Arn"]} for queue_id in queue_ids.values()]
    return {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": assume_role_policy("lambda.amazonaws.com"),
            "ManagedPolicyArns": ["arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"],
            "Policies": [
                {
                    "PolicyName": "queues-and-secret",
                    "PolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Action": [
                                    "sqs:SendMessage",
                                    "sqs:ReceiveMessage",
                                    "sqs:DeleteMessage",
                                    "sqs:ChangeMessageVisibility",
                                    "sqs:GetQueueAttributes",
                                ],
                                "Resource": queues,
                            },
                            {
                                "Effect": "Allow",
                                "Action": "secretsmanager:GetSecretValue",
                                "Resource": {"Ref": "SecretArn"},
                            },
                        ],
                    },
                }
            ],
        },
    }


def _scheduler_role(function_ids: list[str]) -> dict[str, Any]:
    """Assumable by EventBridge Scheduler only, and allowed to invoke the cron functions only."""
    return {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": assume_role_policy("scheduler.amazonaws.com"),
            "Policies": [
                {
                    "PolicyName": "invoke-cron-functions",
                    "PolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Action": "lambda:InvokeFunction",
                                "Resource": [{"Fn::GetAtt": [function_id, "Arn"]} for function_id in function_ids],
                            }
                        ],
                    },
                }
            ],
        },
    }


def main(argv: list[str] | None = None) -> int:
    del argv
    sys.stdout.write(json.dumps(build_template(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
