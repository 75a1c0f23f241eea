"""The streams' home in the AWS template (issue 24), and the one origin in front of everything.

The model. Python on Lambda buffers a response, so the three ``events.py`` functions cannot
stream from a Lambda. They run where a process lives as long as its connections: the
``Dockerfile``'s image (``scripts/serve``'s process, the same ``api/`` files and ``lib/``) as an
**ECS service on Fargate behind an Application Load Balancer**. The alternative AWS documents,
the Lambda Web Adapter with a response-streaming Function URL, was not chosen: every held stream
would be one Lambda execution billed for its whole life and counted against the account's
concurrency (1,000 by default: 1,000 browsers), and a function outside a VPC cannot reach a
database that is only inside one — Fargate tasks sit in the VPC and hold thousands of streams
each. Every task subscribes to the change bus on ``REDIS_URL`` (ElastiCache) with one
connection; one task at a time detects changes in Postgres (``lib.streams.detector``, on
``ERMIS_DATABASE_LISTEN_URL`` if given, else ``DATABASE_URL``), so adding tasks adds nothing to
Postgres's load or connections for change detection.

One origin. Browsers must reach the REST routes and the streams on one origin, so the session
cookie is sent to both and the same-origin rule holds. A **CloudFront distribution** is that
origin: its default behaviour goes to the HTTP API (the Lambdas), and one behaviour per stream
route (``/api/stories/*/events``, derived from ``api/``) goes to the load balancer — caching
off, every header, cookie and query string forwarded (``Last-Event-ID`` among them). The HTTP
API cannot front the streams: its integrations time out after 30 s. CloudFront's own limit is
the origin read timeout, the longest silence between two packets (``ORIGIN_READ_TIMEOUT_S``);
a stream is never silent for longer than its 15 s keep-alive, and no total response time is
set, so CloudFront does not end a stream.

Only CloudFront, only the streams. The load balancer is internet-facing (CloudFront reaches it
by name over TLS), so it is closed to everything else in two ways: its security group admits
HTTPS only from CloudFront's origin-facing managed prefix list (``CloudFrontPrefixListId``), and
its listener forwards a request only when it carries the secret header CloudFront adds to every
request for this origin (``ORIGIN_SECRET_HEADER``, the ``StreamsOriginSecret`` parameter) and
asks for a stream route; anything else — another path, or any path without the header (another
CloudFront distribution is inside the prefix list too) — gets the listener's default answer, a
404 in the functions' JSON error shape. So CloudFront's rules and the HTTP API cannot be
bypassed through this second door: the only thing it serves is the streams, and only to
CloudFront.

Shutdown. ECS replaces a task by deregistering it from the target group first: the load
balancer sends it no new stream, and keeps its open ones for the deregistration delay
(``DEREGISTRATION_DELAY_S``) before ECS sends ``SIGTERM``. Each stream's maximum duration
(``ERMIS_SSE_MAX_DURATION_S``, ``STREAM_MAX_DURATION_S``) is shorter than that delay, so every
stream of a draining task ends itself with ``stream.end`` and its browser reconnects with
``Last-Event-ID`` to another task; a stream still open at ``SIGTERM`` (a stopped Spot task)
gets the same clean end from ``lib.local.server.Server``.

Scale. The benchmark holds 1,000 streams on one core (``benchmarks/README.md``), so each task is
one vCPU and the service tracks ``STREAMS_PER_TASK`` at ``SCALE_AT`` of it. The load balancer
has no per-target connection metric, but every stream reconnects within its maximum duration,
so by Little's law a target holding N streams opens at least N * 60 / max-duration streams a
minute: target tracking on ``ALBRequestCountPerTarget`` at that rate is tracking connections
(streams that end early only make it scale out sooner). Only stream requests reach this target
group; the polling routes stay on Lambda, and they keep working when the streams' home is off
(``StreamsImageUri`` empty): the distribution then sends ``/api/**/events`` to the HTTP API,
which has no such route, answers 404, and ``ermis-realtime.js`` polls.
"""

from __future__ import annotations

import re
from typing import Any

from lib.http.security_headers import EDGE_HEADERS
from lib.local.routing import FunctionRoute
from lib.local.server import HEALTH_PATH
from lib.runtime.aws.secrets import STREAM_SECRET_VARIABLES

STREAM_FILE = "events.py"
CONTAINER_NAME = "streams"
CONTAINER_PORT = 8080  # the Dockerfile's PORT
TASK_CPU = "1024"  # one vCPU: one process fans a burst out on one core
TASK_MEMORY_MB = "2048"
STREAMS_PER_TASK = 1000  # benchmarks/README.md: 1,000 streams on one core, p99 15-17 ms
SCALE_AT = 0.8
STREAM_MAX_DURATION_S = 240
DEREGISTRATION_DELAY_S = 300  # longer than a stream lives: a draining task's streams end themselves
STOP_TIMEOUT_S = 30
LOAD_BALANCER_IDLE_TIMEOUT_S = 120  # a stream writes at least every 15 s
ORIGIN_READ_TIMEOUT_S = 60  # CloudFront's most without a quota increase
HEALTH_CHECK_INTERVAL_S = 15
SCALE_OUT_COOLDOWN_S = 60
SCALE_IN_COOLDOWN_S = 300
ORIGIN_SECRET_HEADER = "X-Ermis-Origin-Secret"  # noqa: S105 - the header's name; its value is a parameter
ORIGIN_SECRET_MIN_CHARS = 32
ORIGIN_SECRET_PATTERN = r"^[A-Za-z0-9._~+-]+$"  # noqa: S105 - the value's shape
PATHS_PER_RULE = 4  # a listener rule holds at most 5 condition values: the paths and the header
NOT_FOUND_BODY = '{"error":{"code":"not_found","message":"No route for this path."}}'
# CloudFront's managed policies, by their documented ids.
CACHING_DISABLED = "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"
ALL_VIEWER_EXCEPT_HOST_HEADER = "b689b0a8-53d0-40ab-baf2-68738e2966ac"
EDGE_RESPONSE_HEADERS = "EdgeResponseHeaders"  # the response-headers policy's logical id
API_ORIGIN = "http-api"
STREAMS_ORIGIN = "streams"
STREAMS_ON = "StreamsOn"
SITE_DOMAIN_GIVEN = "SiteDomainGiven"

PARAMETERS: dict[str, dict[str, Any]] = {
    "StreamsImageUri": {
        "Type": "String",
        "Default": "",
        "Description": "the streams' image in ECR (docker build of the Dockerfile); empty: no streams, browsers poll",
    },
    "VpcId": {"Type": "String", "Default": "", "Description": "the VPC of the load balancer and the tasks"},
    "LoadBalancerSubnetIds": {
        "Type": "CommaDelimitedList",
        "Default": "",
        "Description": "public subnets, in two or more zones, for the load balancer",
    },
    "TaskSubnetIds": {
        "Type": "CommaDelimitedList",
        "Default": "",
        "Description": "subnets for the tasks: ones that reach the database, Redis and ECR",
    },
    "TaskPublicIp": {"Type": "String", "AllowedValues": ["ENABLED", "DISABLED"], "Default": "DISABLED"},
    "StreamsDomainName": {
        "Type": "String",
        "Default": "",
        "Description": "the load balancer's name, the one CloudFront connects to over TLS",
    },
    "StreamsCertificateArn": {
        "Type": "String",
        "Default": "",
        "Description": "an ACM certificate in the stack's region for StreamsDomainName",
    },
    "StreamsHostedZoneId": {"Type": "String", "Default": "", "Description": "the Route 53 zone of StreamsDomainName"},
    "CloudFrontPrefixListId": {
        "Type": "String",
        "Default": "",
        "Description": "the region's com.amazonaws.global.cloudfront.origin-facing managed prefix list"
        " (aws ec2 describe-managed-prefix-lists): the only source the load balancer admits",
    },
    "StreamsOriginSecret": {
        "Type": "String",
        "NoEcho": True,
        # No default, 32 characters at least, and none of the load balancer's wildcards: its
        # header conditions match case-insensitively and read * and ? as patterns, so a value
        # with them (or a short one) would let a guess through.
        "MinLength": ORIGIN_SECRET_MIN_CHARS,
        "AllowedPattern": ORIGIN_SECRET_PATTERN,
        "ConstraintDescription": f"at least {ORIGIN_SECRET_MIN_CHARS} characters of A-Z a-z 0-9 and - _ . ~ +",
        "Description": f"a long random value CloudFront sends as {ORIGIN_SECRET_HEADER}: the load balancer"
        " forwards nothing without it (openssl rand -hex 32)",
    },
    "StreamsMinTasks": {"Type": "Number", "Default": 2, "MinValue": 1},
    "StreamsMaxTasks": {"Type": "Number", "Default": 10, "MinValue": 1},
    "SiteDomainName": {
        "Type": "String",
        "Default": "",
        "Description": "the site's own name on the distribution; empty: the distribution's cloudfront.net name",
    },
    "SiteCertificateArn": {
        "Type": "String",
        "Default": "",
        "Description": "an ACM certificate in us-east-1 for SiteDomainName",
    },
}
CONDITIONS: dict[str, Any] = {
    STREAMS_ON: {"Fn::Not": [{"Fn::Equals": [{"Ref": "StreamsImageUri"}, ""]}]},
    SITE_DOMAIN_GIVEN: {"Fn::Not": [{"Fn::Equals": [{"Ref": "SiteDomainName"}, ""]}]},
}

# What the home needs, checked by CloudFormation before it creates anything: a clear refusal
# naming the parameter, not a load balancer or a distribution failing half-way through.
STREAMS_NEED = (
    "VpcId",
    "StreamsDomainName",
    "StreamsCertificateArn",
    "StreamsHostedZoneId",
    "CloudFrontPrefixListId",
)
STREAMS_NEED_LISTS = ("LoadBalancerSubnetIds", "TaskSubnetIds")
RULES: dict[str, Any] = {
    "StreamsHomeIsWhole": {
        "RuleCondition": CONDITIONS[STREAMS_ON],
        "Assertions": [
            {
                "Assert": {"Fn::Not": [{empty: [{"Ref": name}, ""]}]},
                "AssertDescription": f"StreamsImageUri needs {name}",
            }
            # A list parameter left empty is [""]: each of its members is "".
            for names, empty in ((STREAMS_NEED, "Fn::Equals"), (STREAMS_NEED_LISTS, "Fn::EachMemberEquals"))
            for name in names
        ],
    },
    "SiteDomainHasItsCertificate": {
        "RuleCondition": CONDITIONS[SITE_DOMAIN_GIVEN],
        "Assertions": [
            {
                "Assert": {"Fn::Not": [{"Fn::Equals": [{"Ref": "SiteCertificateArn"}, ""]}]},
                "AssertDescription": "SiteDomainName needs SiteCertificateArn (ACM, us-east-1)",
            }
        ],
    },
}
# cfn-lint checks an optional parameter's empty default against the pattern of each property it
# reaches (a VPC id, a subnet id, a certificate ARN); where the rules above refuse that default
# whenever the resource exists, the warning cannot apply, and is silenced on that resource only.
DEFAULTS_REFUSED_BY_RULES = {"cfn-lint": {"config": {"ignore_checks": ["W1030"]}}}


def is_stream(route: FunctionRoute) -> bool:
    return route.file.rsplit("/", 1)[-1] == STREAM_FILE


def path_pattern(route: FunctionRoute) -> str:
    """``/api/stories/{storyId}/events`` → CloudFront's ``/api/stories/*/events``."""
    return re.sub(r"\{[^}]+\}", "*", route.pattern)


def site_origin() -> dict[str, Any]:
    """The origin browsers use: the distribution, under the site's own name when it has one.
    The functions allow it (``ERMIS_ALLOWED_ORIGINS``): behind CloudFront their ``Host`` is the
    HTTP API's, not the one the browser's ``Origin`` names."""
    return {
        "Fn::If": [
            SITE_DOMAIN_GIVEN,
            {"Fn::Sub": "https://${SiteDomainName}"},
            {"Fn::Sub": "https://${EdgeDistribution.DomainName}"},
        ]
    }


def target_requests_per_minute() -> int:
    """The stream opens a minute per task that mean ``SCALE_AT`` of ``STREAMS_PER_TASK`` held."""
    return round(STREAMS_PER_TASK * SCALE_AT * 60 / STREAM_MAX_DURATION_S)


def stream_rules(stream_routes: list[FunctionRoute]) -> dict[str, Any]:
    """The listener's rules: a stream route with CloudFront's secret header is forwarded (as
    many rules as the routes need, ``PATHS_PER_RULE`` paths each); nothing else is."""
    patterns = sorted(path_pattern(route) for route in stream_routes)
    chunks = [patterns[i : i + PATHS_PER_RULE] for i in range(0, len(patterns), PATHS_PER_RULE)]
    return {
        f"StreamsListenerRule{number}": {
            "Type": "AWS::ElasticLoadBalancingV2::ListenerRule",
            "Properties": {
                "ListenerArn": {"Ref": "StreamsListener"},
                "Priority": number,
                "Conditions": [
                    {"Field": "path-pattern", "PathPatternConfig": {"Values": paths}},
                    {
                        "Field": "http-header",
                        "HttpHeaderConfig": {
                            "HttpHeaderName": ORIGIN_SECRET_HEADER,
                            "Values": [{"Ref": "StreamsOriginSecret"}],
                        },
                    },
                ],
                "Actions": [{"Type": "forward", "TargetGroupArn": {"Ref": "StreamsTargetGroup"}}],
            },
        }
        for number, paths in enumerate(chunks, start=1)
    }


def streams_resources(environment: dict[str, Any], stream_routes: list[FunctionRoute]) -> dict[str, Any]:
    """The ECS service, its load balancer, DNS name, roles, logs and scaling; all under ``StreamsOn``.
    ``environment``: the variables every function gets that the streams need too."""
    resources: dict[str, Any] = {
        "StreamsLoadBalancerSecurityGroup": {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {
                "GroupDescription": "HTTPS from the CloudFront origin-facing prefix list to the streams load balancer",
                "VpcId": {"Ref": "VpcId"},
                "SecurityGroupIngress": [
                    {
                        "IpProtocol": "tcp",
                        "FromPort": 443,
                        "ToPort": 443,
                        "SourcePrefixListId": {"Ref": "CloudFrontPrefixListId"},
                    }
                ],
            },
        },
        "StreamsTaskSecurityGroup": {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {
                "GroupDescription": "the streams tasks, reached by their load balancer only",
                "VpcId": {"Ref": "VpcId"},
                "SecurityGroupIngress": [
                    {
                        "IpProtocol": "tcp",
                        "FromPort": CONTAINER_PORT,
                        "ToPort": CONTAINER_PORT,
                        "SourceSecurityGroupId": {"Ref": "StreamsLoadBalancerSecurityGroup"},
                    }
                ],
            },
        },
        "StreamsLoadBalancer": {
            "Type": "AWS::ElasticLoadBalancingV2::LoadBalancer",
            "Properties": {
                "Type": "application",
                "Scheme": "internet-facing",
                "Subnets": {"Ref": "LoadBalancerSubnetIds"},
                "SecurityGroups": [{"Ref": "StreamsLoadBalancerSecurityGroup"}],
                "LoadBalancerAttributes": [
                    {"Key": "idle_timeout.timeout_seconds", "Value": str(LOAD_BALANCER_IDLE_TIMEOUT_S)}
                ],
            },
        },
        "StreamsTargetGroup": {
            "Type": "AWS::ElasticLoadBalancingV2::TargetGroup",
            "Properties": {
                "VpcId": {"Ref": "VpcId"},
                "TargetType": "ip",
                "Protocol": "HTTP",
                "Port": CONTAINER_PORT,
                "HealthCheckProtocol": "HTTP",
                "HealthCheckPath": HEALTH_PATH,
                "HealthCheckIntervalSeconds": HEALTH_CHECK_INTERVAL_S,
                "HealthyThresholdCount": 2,
                "UnhealthyThresholdCount": 3,
                "Matcher": {"HttpCode": "200"},
                "TargetGroupAttributes": [
                    {"Key": "deregistration_delay.timeout_seconds", "Value": str(DEREGISTRATION_DELAY_S)},
                    # Held streams are outstanding requests: a new stream goes to the task holding fewest.
                    {"Key": "load_balancing.algorithm.type", "Value": "least_outstanding_requests"},
                ],
            },
        },
        "StreamsListener": {
            "Type": "AWS::ElasticLoadBalancingV2::Listener",
            "Properties": {
                "LoadBalancerArn": {"Ref": "StreamsLoadBalancer"},
                "Protocol": "HTTPS",
                "Port": 443,
                "Certificates": [{"CertificateArn": {"Ref": "StreamsCertificateArn"}}],
                "DefaultActions": [
                    {
                        "Type": "fixed-response",
                        "FixedResponseConfig": {
                            "StatusCode": "404",
                            "ContentType": "application/json",
                            "MessageBody": NOT_FOUND_BODY,
                        },
                    }
                ],
            },
        },
        **stream_rules(stream_routes),
        "StreamsDnsRecord": {
            "Type": "AWS::Route53::RecordSet",
            "Properties": {
                "HostedZoneId": {"Ref": "StreamsHostedZoneId"},
                "Name": {"Ref": "StreamsDomainName"},
                "Type": "CNAME",
                "TTL": "60",
                "ResourceRecords": [{"Fn::GetAtt": ["StreamsLoadBalancer", "DNSName"]}],
            },
        },
        "StreamsCluster": {"Type": "AWS::ECS::Cluster", "Properties": {}},
        "StreamsLogGroup": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 30}},
        "StreamsExecutionRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": assume_role_policy("ecs-tasks.amazonaws.com"),
                "ManagedPolicyArns": ["arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"],
                "Policies": [
                    {
                        "PolicyName": "read-the-secret",
                        "PolicyDocument": {
                            "Version": "2012-10-17",
                            "Statement": [
                                {
                                    "Effect": "Allow",
                                    "Action": "secretsmanager:GetSecretValue",
                                    "Resource": {"Ref": "SecretArn"},
                                }
                            ],
                        },
                    }
                ],
            },
        },
        "StreamsTaskDefinition": {
            "Type": "AWS::ECS::TaskDefinition",
            "Properties": {
                "Family": {"Fn::Sub": "${AWS::StackName}-streams"},
                "RequiresCompatibilities": ["FARGATE"],
                "NetworkMode": "awsvpc",
                "Cpu": TASK_CPU,
                "Memory": TASK_MEMORY_MB,
                "ExecutionRoleArn": {"Fn::GetAtt": ["StreamsExecutionRole", "Arn"]},
                "ContainerDefinitions": [
                    {
                        "Name": CONTAINER_NAME,
                        "Image": {"Ref": "StreamsImageUri"},
                        "Essential": True,
                        "PortMappings": [{"ContainerPort": CONTAINER_PORT, "Protocol": "tcp"}],
                        "StopTimeout": STOP_TIMEOUT_S,
                        "Environment": [
                            {"Name": name, "Value": value}
                            for name, value in {
                                **environment,
                                "ERMIS_SSE_MAX_DURATION_S": str(STREAM_MAX_DURATION_S),
                            }.items()
                        ],
                        # Resolved by ECS as the container starts (the execution role may read
                        # the secret): the task definition holds where each value is, never it.
                        "Secrets": [
                            {"Name": name, "ValueFrom": {"Fn::Sub": f"${{SecretArn}}:{name}::"}}
                            for name in STREAM_SECRET_VARIABLES
                        ],
                        "LogConfiguration": {
                            "LogDriver": "awslogs",
                            "Options": {
                                "awslogs-group": {"Ref": "StreamsLogGroup"},
                                "awslogs-region": {"Ref": "AWS::Region"},
                                "awslogs-stream-prefix": CONTAINER_NAME,
                            },
                        },
                    }
                ],
            },
        },
        "StreamsService": {
            "Type": "AWS::ECS::Service",
            "DependsOn": ["StreamsListener"],
            "Properties": {
                "Cluster": {"Ref": "StreamsCluster"},
                "TaskDefinition": {"Ref": "StreamsTaskDefinition"},
                "LaunchType": "FARGATE",
                "DesiredCount": {"Ref": "StreamsMinTasks"},
                "HealthCheckGracePeriodSeconds": 30,
                # A replacement starts before the task it replaces drains: streams move, none wait.
                "DeploymentConfiguration": {"MinimumHealthyPercent": 100, "MaximumPercent": 200},
                "NetworkConfiguration": {
                    "AwsvpcConfiguration": {
                        "Subnets": {"Ref": "TaskSubnetIds"},
                        "SecurityGroups": [{"Ref": "StreamsTaskSecurityGroup"}],
                        "AssignPublicIp": {"Ref": "TaskPublicIp"},
                    }
                },
                "LoadBalancers": [
                    {
                        "ContainerName": CONTAINER_NAME,
                        "ContainerPort": CONTAINER_PORT,
                        "TargetGroupArn": {"Ref": "StreamsTargetGroup"},
                    }
                ],
            },
        },
        "StreamsScalableTarget": {
            "Type": "AWS::ApplicationAutoScaling::ScalableTarget",
            "Properties": {
                "ServiceNamespace": "ecs",
                "ScalableDimension": "ecs:service:DesiredCount",
                "ResourceId": {"Fn::Sub": "service/${StreamsCluster}/${StreamsService.Name}"},
                "MinCapacity": {"Ref": "StreamsMinTasks"},
                "MaxCapacity": {"Ref": "StreamsMaxTasks"},
            },
        },
        "StreamsScalingPolicy": {
            "Type": "AWS::ApplicationAutoScaling::ScalingPolicy",
            "Properties": {
                "PolicyName": {"Fn::Sub": "${AWS::StackName}-streams-held"},
                "PolicyType": "TargetTrackingScaling",
                "ScalingTargetId": {"Ref": "StreamsScalableTarget"},
                "TargetTrackingScalingPolicyConfiguration": {
                    "TargetValue": target_requests_per_minute(),
                    "ScaleOutCooldown": SCALE_OUT_COOLDOWN_S,
                    "ScaleInCooldown": SCALE_IN_COOLDOWN_S,
                    "PredefinedMetricSpecification": {
                        "PredefinedMetricType": "ALBRequestCountPerTarget",
                        "ResourceLabel": {
                            "Fn::Join": [
                                "/",
                                [
                                    {"Fn::GetAtt": ["StreamsLoadBalancer", "LoadBalancerFullName"]},
                                    {"Fn::GetAtt": ["StreamsTargetGroup", "TargetGroupFullName"]},
                                ],
                            ]
                        },
                    },
                },
            },
        },
    }
    for body in resources.values():
        body["Condition"] = STREAMS_ON
        body["Metadata"] = DEFAULTS_REFUSED_BY_RULES
    return resources


def edge_response_headers() -> dict[str, Any]:
    """The distribution's response-headers policy: ``EDGE_HEADERS`` — the security headers the
    functions send anyway, and HSTS, which only the HTTPS edge may send — on every answer,
    overriding what an origin said."""
    csp, frame = EDGE_HEADERS["Content-Security-Policy"], EDGE_HEADERS["X-Frame-Options"]
    hsts = dict(part.strip().partition("=")[::2] for part in EDGE_HEADERS["Strict-Transport-Security"].split(";"))
    return {
        "Type": "AWS::CloudFront::ResponseHeadersPolicy",
        "Properties": {
            "ResponseHeadersPolicyConfig": {
                "Name": {"Fn::Sub": "${AWS::StackName}-edge-headers"},
                "Comment": "lib.http.security_headers.EDGE_HEADERS",
                "SecurityHeadersConfig": {
                    "StrictTransportSecurity": {
                        "AccessControlMaxAgeSec": int(hsts["max-age"]),
                        "IncludeSubdomains": "includeSubDomains" in hsts,
                        "Preload": False,
                        "Override": True,
                    },
                    "ContentSecurityPolicy": {"ContentSecurityPolicy": csp, "Override": True},
                    "ContentTypeOptions": {"Override": True},  # nosniff, CloudFront's only value
                    "FrameOptions": {"FrameOption": frame, "Override": True},
                    "ReferrerPolicy": {"ReferrerPolicy": EDGE_HEADERS["Referrer-Policy"], "Override": True},
                },
            }
        },
    }


def edge_distribution(stream_routes: list[FunctionRoute]) -> dict[str, Any]:
    """The CloudFront distribution: the HTTP API by default, each stream route to the load
    balancer; every answer with the edge's headers (``edge_response_headers``)."""
    uncached = {
        "CachePolicyId": CACHING_DISABLED,
        "OriginRequestPolicyId": ALL_VIEWER_EXCEPT_HOST_HEADER,
        "ResponseHeadersPolicyId": {"Ref": EDGE_RESPONSE_HEADERS},
    }
    stream_behaviours = [
        {
            "PathPattern": path_pattern(route),
            "TargetOriginId": STREAMS_ORIGIN,
            "ViewerProtocolPolicy": "https-only",
            "AllowedMethods": ["GET", "HEAD"],
            "Compress": False,
            **uncached,
        }
        for route in stream_routes
    ]
    streams_origin = {
        "Id": STREAMS_ORIGIN,
        "DomainName": {"Ref": "StreamsDomainName"},
        "OriginCustomHeaders": [{"HeaderName": ORIGIN_SECRET_HEADER, "HeaderValue": {"Ref": "StreamsOriginSecret"}}],
        "CustomOriginConfig": {
            "OriginProtocolPolicy": "https-only",
            "OriginSSLProtocols": ["TLSv1.2"],
            "OriginReadTimeout": ORIGIN_READ_TIMEOUT_S,
        },
    }
    api_origin = {
        "Id": API_ORIGIN,
        "DomainName": {"Fn::Sub": "${HttpApi}.execute-api.${AWS::Region}.amazonaws.com"},
        "CustomOriginConfig": {"OriginProtocolPolicy": "https-only", "OriginSSLProtocols": ["TLSv1.2"]},
    }
    no_value = {"Ref": "AWS::NoValue"}
    return {
        "Type": "AWS::CloudFront::Distribution",
        "Metadata": DEFAULTS_REFUSED_BY_RULES,  # SiteCertificateArn, used only with SiteDomainName
        "Properties": {
            "DistributionConfig": {
                "Enabled": True,
                "Comment": {"Fn::Sub": "${AWS::StackName}: the HTTP API and the streams on one origin"},
                "HttpVersion": "http2",
                "Aliases": {"Fn::If": [SITE_DOMAIN_GIVEN, [{"Ref": "SiteDomainName"}], no_value]},
                "ViewerCertificate": {
                    "Fn::If": [
                        SITE_DOMAIN_GIVEN,
                        {
                            "AcmCertificateArn": {"Ref": "SiteCertificateArn"},
                            "SslSupportMethod": "sni-only",
                            "MinimumProtocolVersion": "TLSv1.2_2021",
                        },
                        {"CloudFrontDefaultCertificate": True},
                    ]
                },
                "Origins": {"Fn::If": [STREAMS_ON, [api_origin, streams_origin], [api_origin]]},
                "DefaultCacheBehavior": {
                    "TargetOriginId": API_ORIGIN,
                    "ViewerProtocolPolicy": "redirect-to-https",
                    "AllowedMethods": ["GET", "HEAD", "OPTIONS", "PUT", "PATCH", "POST", "DELETE"],
                    **uncached,
                },
                "CacheBehaviors": {"Fn::If": [STREAMS_ON, stream_behaviours, no_value]},
            }
        },
    }


def assume_role_policy(service: str) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    }
