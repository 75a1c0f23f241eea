"""lib.ops.aws_streams: the streams' home in the AWS template, deployed into moto's CloudFormation
(server mode, loopback). moto creates the security groups, load balancer, target group,
listener and its rules, DNS record, cluster, log group and role; what it does not implement — the
distribution, the scaling target and policy — and the properties it drops from the resources it
does create (the task definition's Fargate settings, the service's network and load balancer,
the load balancer's and target group's attributes, its ingress from a prefix list) are applied
through moto's own EC2, ECS, ELBv2, CloudFront and Application Auto Scaling APIs from the
template's properties, so those APIs at least accept them. Without the home, the streams are
nowhere — no Lambda, no HTTP API route — and the polling routes answer on Lambda."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

from lib.bundle import PROJECT_ROOT
from lib.http.security_headers import EDGE_HEADERS
from lib.local.routing import discover_routes
from lib.local.server import HEALTH_PATH
from lib.ops.aws_streams import (
    DEREGISTRATION_DELAY_S,
    ORIGIN_SECRET_HEADER,
    STREAM_MAX_DURATION_S,
    STREAMS_PER_TASK,
    is_stream,
    path_pattern,
    target_requests_per_minute,
)
from lib.ops.aws_template import build_template
from lib.runtime.aws.secrets import SECRET_VARIABLES, STREAM_SECRET_VARIABLES, forget_loaded_secret
from lib.streams.watch import PING_SECONDS
from tests.ops.test_aws_template import apply_what_moto_cloudformation_lacks, resources_of
from tests.runtime.aws.test_http import http_api_v2_event
from tests.support.auth import session_headers
from tests.support.aws import (
    ORIGIN_SECRET,
    SITE_DOMAIN,
    STACK_SECRETS,
    MotoAws,
    StackValues,
    create_stack_secret,
    deploy_stack,
    invoke_lambda,
    moto_aws,
    stack_values,
    template_values,
)
from tests.support.catalogs import add_draft
from tests.support.security import record

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS")
TEMPLATE = build_template()
STREAM_ROUTES = [route for route in discover_routes(PROJECT_ROOT) if is_stream(route)]
STREAMS_DOMAIN = "streams.example.com"
IMAGE = "123456789012.dkr.ecr.eu-north-1.amazonaws.com/ermis-streams:1"
CLOUDFRONT_PREFIX_LIST = "com.amazonaws.global.cloudfront.origin-facing"


@pytest.fixture
def aws(set_env) -> Iterator[MotoAws]:
    with moto_aws(set_env) as running:
        yield running


def lambda_entrypoints(template: dict[str, Any]) -> list[str]:
    functions = resources_of(template, "AWS::Lambda::Function").values()
    return [props["Environment"]["Variables"]["ERMIS_AWS_ENTRYPOINT"] for props in functions]


def stream_behaviours(template: dict[str, Any]) -> list[dict[str, Any]]:
    config = template["Resources"]["EdgeDistribution"]["Properties"]["DistributionConfig"]
    return config["CacheBehaviors"]["Fn::If"][1]


def streams_parameters(aws: MotoAws) -> dict[str, str]:
    """A VPC with two public subnets, a hosted zone and a certificate, made in moto for the home."""
    ec2 = aws.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{index}.0/24", AvailabilityZone=f"eu-north-1{zone}")["Subnet"][
            "SubnetId"
        ]
        for index, zone in enumerate("ab")
    ]
    zone = aws.client("route53").create_hosted_zone(Name="example.com", CallerReference="ermis")["HostedZone"]["Id"]
    return {
        "CloudFrontPrefixListId": cloudfront_prefix_list(aws),
        "StreamsOriginSecret": ORIGIN_SECRET,
        "StreamsImageUri": IMAGE,
        "VpcId": vpc,
        "LoadBalancerSubnetIds": ",".join(subnets),
        "TaskSubnetIds": ",".join(subnets),
        "StreamsDomainName": STREAMS_DOMAIN,
        "StreamsCertificateArn": certificate(aws, STREAMS_DOMAIN),
        "StreamsHostedZoneId": zone.rsplit("/", 1)[-1],
    }


def cloudfront_prefix_list(aws: MotoAws) -> str:
    """The region's CloudFront origin-facing prefix list, as the README says to look it up (made
    in moto first when moto does not carry it)."""
    ec2 = aws.client("ec2")
    name = [{"Name": "prefix-list-name", "Values": [CLOUDFRONT_PREFIX_LIST]}]
    found = ec2.describe_managed_prefix_lists(Filters=name)["PrefixLists"]
    if not found:
        created = ec2.create_managed_prefix_list(
            PrefixListName=CLOUDFRONT_PREFIX_LIST, MaxEntries=60, AddressFamily="IPv4"
        )
        return created["PrefixList"]["PrefixListId"]
    return found[0]["PrefixListId"]


def certificate(aws: MotoAws, domain: str) -> str:
    return aws.client("acm").request_certificate(DomainName=domain)["CertificateArn"]


def test_every_api_file_has_one_home() -> None:
    """A stream behind the distribution's stream behaviour, every other file a Lambda; the HTTP API
    has no stream route, so a stream request never reaches a Lambda."""
    routes = discover_routes(PROJECT_ROOT)
    behaviours = [behaviour["PathPattern"] for behaviour in stream_behaviours(TEMPLATE)]
    assert sorted(behaviours) == sorted(path_pattern(route) for route in STREAM_ROUTES)
    assert len(STREAM_ROUTES) == 3
    homes = lambda_entrypoints(TEMPLATE) + [route.file for route in STREAM_ROUTES]
    assert sorted(homes) == sorted(route.file for route in routes)
    route_keys = [props["RouteKey"] for props in resources_of(TEMPLATE, "AWS::ApiGatewayV2::Route").values()]
    assert not [key for key in route_keys if key.endswith("/events")]


def test_a_stream_route_added_under_api_gets_its_home_with_no_other_edit(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECT_ROOT / "api", project / "api")
    (project / "api/desks/[deskId]").mkdir(parents=True)
    shutil.copy(project / "api/feed/events.py", project / "api/desks/[deskId]/events.py")
    shutil.copy(PROJECT_ROOT / "vercel.json", project / "vercel.json")
    template = build_template(project)
    assert "/api/desks/*/events" in [behaviour["PathPattern"] for behaviour in stream_behaviours(template)]
    assert "api/desks/[deskId]/events.py" not in lambda_entrypoints(template)
    route_keys = [props["RouteKey"] for props in resources_of(template, "AWS::ApiGatewayV2::Route").values()]
    assert "ANY /api/desks/{deskId}/events" not in route_keys


def test_the_timings_fit_inside_each_other() -> None:
    """A stream writes before CloudFront's read timeout and the load balancer's idle timeout, ends
    itself before its draining task's deregistration delay runs out, and the scaling target is
    a number of held streams one task can hold."""
    config = TEMPLATE["Resources"]["EdgeDistribution"]["Properties"]["DistributionConfig"]
    streams_origin = config["Origins"]["Fn::If"][1][1]
    assert PING_SECONDS < streams_origin["CustomOriginConfig"]["OriginReadTimeout"]
    load_balancer = TEMPLATE["Resources"]["StreamsLoadBalancer"]["Properties"]
    assert PING_SECONDS < int(load_balancer["LoadBalancerAttributes"][0]["Value"])
    assert STREAM_MAX_DURATION_S + 30 <= DEREGISTRATION_DELAY_S
    # Little's law: the streams a task holds at the target rate fit in what one task holds.
    held_at_target = target_requests_per_minute() * STREAM_MAX_DURATION_S / 60
    assert 0.5 * STREAMS_PER_TASK <= held_at_target < STREAMS_PER_TASK


def refusals(parameters: dict[str, str]) -> list[str]:
    """What CloudFormation's rules would refuse a stack with these parameters for."""
    values = template_values(TEMPLATE, parameters)
    return [
        assertion["AssertDescription"]
        for rule in TEMPLATE["Rules"].values()
        if values.resolve(rule["RuleCondition"])
        for assertion in rule["Assertions"]
        if not values.resolve(assertion["Assert"])
    ]


def test_a_home_missing_a_part_is_refused_before_anything_is_created() -> None:
    whole = {"StreamsImageUri": IMAGE, "VpcId": "vpc-1", "StreamsDomainName": STREAMS_DOMAIN}
    whole |= {"StreamsCertificateArn": "arn:aws:acm:eu-north-1:1:certificate/s", "StreamsHostedZoneId": "Z1"}
    whole |= {"LoadBalancerSubnetIds": "subnet-1,subnet-2", "TaskSubnetIds": "subnet-3"}
    whole |= {"CloudFrontPrefixListId": "pl-1"}
    assert refusals(whole) == [] and refusals({}) == []  # no image: no home, nothing needed
    for missing in ("VpcId", "StreamsDomainName", "StreamsCertificateArn", "StreamsHostedZoneId", "TaskSubnetIds",
                    "CloudFrontPrefixListId"):  # fmt: skip
        assert refusals({**whole, missing: ""}) == [f"StreamsImageUri needs {missing}"]
    assert refusals({"SiteDomainName": SITE_DOMAIN}) == ["SiteDomainName needs SiteCertificateArn (ACM, us-east-1)"]


@pytest.mark.security
def test_the_streams_home_deploys_into_cloudformation(aws: MotoAws) -> None:
    parameters = streams_parameters(aws)
    deploy_stack(aws, TEMPLATE, **parameters)
    elb, ecs = aws.client("elbv2"), aws.client("ecs")

    [load_balancer] = elb.describe_load_balancers()["LoadBalancers"]
    assert load_balancer["Scheme"] == "internet-facing"
    assert sorted(zone["SubnetId"] for zone in load_balancer["AvailabilityZones"]) == sorted(
        parameters["LoadBalancerSubnetIds"].split(",")
    )
    [target_group] = elb.describe_target_groups()["TargetGroups"]
    assert (target_group["TargetType"], target_group["Port"], target_group["HealthCheckPath"]) == (
        "ip",
        8080,
        HEALTH_PATH,
    )
    [listener] = elb.describe_listeners(LoadBalancerArn=load_balancer["LoadBalancerArn"])["Listeners"]
    assert (listener["Protocol"], listener["Port"]) == ("HTTPS", 443)
    assert listener["Certificates"][0]["CertificateArn"] == parameters["StreamsCertificateArn"]
    records = aws.client("route53").list_resource_record_sets(HostedZoneId=parameters["StreamsHostedZoneId"])
    [dns] = [item for item in records["ResourceRecordSets"] if item["Name"].rstrip(".") == STREAMS_DOMAIN]
    assert (dns["Type"], dns["ResourceRecords"]) == ("CNAME", [{"Value": load_balancer["DNSName"]}])
    for function in aws.client("lambda").list_functions()["Functions"]:
        assert function["Environment"]["Variables"]["ERMIS_ALLOWED_ORIGINS"] == f"https://{SITE_DOMAIN}"

    values = stack_values(aws, TEMPLATE, parameters)
    apply_what_moto_cloudformation_lacks(aws, values)
    service = apply_the_streams_service(aws, values)
    assert_only_cloudfront_and_only_streams(aws, load_balancer, listener, target_group, parameters)

    attributes = elb.describe_target_group_attributes(TargetGroupArn=target_group["TargetGroupArn"])["Attributes"]
    delay = int(next(item["Value"] for item in attributes if item["Key"] == "deregistration_delay.timeout_seconds"))
    [definition_arn] = ecs.list_task_definitions(familyPrefix="ermis-streams")["taskDefinitionArns"][-1:]
    definition = ecs.describe_task_definition(taskDefinition=definition_arn)["taskDefinition"]
    assert (definition["requiresCompatibilities"], definition["networkMode"], definition["cpu"]) == (
        ["FARGATE"],
        "awsvpc",
        "1024",
    )
    [container] = definition["containerDefinitions"]
    environment = {item["name"]: item["value"] for item in container["environment"]}
    assert container["image"] == IMAGE and container["portMappings"][0]["containerPort"] == 8080
    assert int(environment["ERMIS_SSE_MAX_DURATION_S"]) < delay
    assert environment["ERMIS_ALLOWED_ORIGINS"] == f"https://{SITE_DOMAIN}"
    assert (environment["ERMIS_ENV"], environment["CLERK_AUTHORIZED_PARTIES"]) == (
        "production",
        f"https://{SITE_DOMAIN}",
    )
    # The secrets by reference (what ecs:DescribeTaskDefinition shows holds none of them), and
    # only those the streams use: no cron bearer, no queue key.
    secret_arn = aws.client("secretsmanager").describe_secret(SecretId="ermis/functions")["ARN"]
    assert {item["name"]: item["valueFrom"] for item in container["secrets"]} == {
        name: f"{secret_arn}:{name}::" for name in STREAM_SECRET_VARIABLES
    }
    assert not set(SECRET_VARIABLES) & set(environment)
    shown = json.dumps(ecs.describe_task_definition(taskDefinition=definition_arn), default=str)
    leaks = [name for name, value in STACK_SECRETS.items() if value in shown]
    record("deployed configuration", "the streams' describe-task-definition, for any of the secret's values",
           tried=1, bad=len(leaks))  # fmt: skip
    assert leaks == []
    assert not {"CRON_SECRET", "ERMIS_QUEUE_SIGNING_SECRET"} & set(STREAM_SECRET_VARIABLES)  # the streams need neither
    assert service["loadBalancers"] == [
        {"targetGroupArn": target_group["TargetGroupArn"], "containerName": "streams", "containerPort": 8080}
    ]
    assert service["launchType"] == "FARGATE" and service["taskDefinition"] == definition["taskDefinitionArn"]
    assert service["networkConfiguration"]["awsvpcConfiguration"]["subnets"] == parameters["TaskSubnetIds"].split(",")

    autoscaling = aws.client("application-autoscaling")
    [target] = autoscaling.describe_scalable_targets(ServiceNamespace="ecs")["ScalableTargets"]
    assert target["ResourceId"] == f"service/{service['clusterArn'].rsplit('/', 1)[-1]}/{service['serviceName']}"
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 10)
    [policy] = autoscaling.describe_scaling_policies(ServiceNamespace="ecs")["ScalingPolicies"]
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["TargetValue"] == target_requests_per_minute()
    label = tracking["PredefinedMetricSpecification"]["ResourceLabel"]
    assert re.fullmatch(r"app/[^/]+/[0-9a-f]+/targetgroup/[^/]+/[0-9a-f]+", label), label

    distribution = apply_the_distribution(aws, values)
    origins = {origin["Id"]: origin for origin in distribution["Origins"]["Items"]}
    assert origins["streams"]["DomainName"] == STREAMS_DOMAIN
    assert origins["http-api"]["DomainName"].endswith(".execute-api.eu-north-1.amazonaws.com")
    behaviours = distribution["CacheBehaviors"]["Items"]
    assert sorted(behaviour["PathPattern"] for behaviour in behaviours) == sorted(
        path_pattern(route) for route in STREAM_ROUTES
    )
    assert {behaviour["TargetOriginId"] for behaviour in behaviours} == {"streams"}
    assert origins["streams"]["CustomHeaders"]["Items"] == [
        {"HeaderName": ORIGIN_SECRET_HEADER, "HeaderValue": ORIGIN_SECRET}
    ]  # what the listener's rules ask for
    assert distribution["DefaultCacheBehavior"]["TargetOriginId"] == "http-api"
    assert distribution["Aliases"]["Items"] == [SITE_DOMAIN]


def assert_only_cloudfront_and_only_streams(
    aws: MotoAws, load_balancer: dict, listener: dict, target_group: dict, parameters: dict[str, str]
) -> None:
    """The second front door is shut: HTTPS from CloudFront's prefix list only (no CIDR at all),
    a 404 for whatever no rule forwards, and every rule forwarding only stream routes that carry
    CloudFront's secret header. (moto keeps what the listener is given but routes no request
    through it: a request for another path is a 404 because no rule names its path and the
    default action is the 404.)"""
    ec2, elb = aws.client("ec2"), aws.client("elbv2")
    [group] = ec2.describe_security_groups(GroupIds=load_balancer["SecurityGroups"])["SecurityGroups"]
    [ingress] = group["IpPermissions"]
    assert (ingress["IpProtocol"], ingress["FromPort"], ingress["ToPort"]) == ("tcp", 443, 443)
    assert [item["PrefixListId"] for item in ingress["PrefixListIds"]] == [parameters["CloudFrontPrefixListId"]]
    assert ingress.get("IpRanges", []) == [] and ingress.get("Ipv6Ranges", []) == []
    [default] = listener["DefaultActions"]
    assert default["Type"] == "fixed-response" and default["FixedResponseConfig"]["StatusCode"] == "404"
    assert json.loads(default["FixedResponseConfig"]["MessageBody"])["error"]["code"] == "not_found"
    rules = [rule for rule in elb.describe_rules(ListenerArn=listener["ListenerArn"])["Rules"] if not rule["IsDefault"]]
    forwarded: list[str] = []
    for rule in rules:
        conditions = {condition["Field"]: condition for condition in rule["Conditions"]}
        assert set(conditions) == {"path-pattern", "http-header"}
        header = conditions["http-header"]["HttpHeaderConfig"]
        assert (header["HttpHeaderName"], header["Values"]) == (ORIGIN_SECRET_HEADER, [ORIGIN_SECRET])
        assert [action["TargetGroupArn"] for action in rule["Actions"]] == [target_group["TargetGroupArn"]]
        forwarded += conditions["path-pattern"]["PathPatternConfig"]["Values"]
    assert sorted(forwarded) == sorted(path_pattern(route) for route in STREAM_ROUTES)
    for other in ("/api/admin/flags", "/api/notifications", "/admin/", "/__health", "/api/admin/state/cleanup"):
        assert not any(fnmatchcase(other, pattern) for pattern in forwarded), other


async def test_without_its_home_the_streams_are_nowhere_and_polling_answers(
    aws: MotoAws,
    db,
    set_env,
    database_url: str,
    redis_url: str,
    session_keys: tuple[str, str],
    mint_token: Callable[..., str],
) -> None:
    # The functions' secret, holding what this test's services need; the functions read it from
    # moto's Secrets Manager at their cold start (nothing of it is in their environment).
    secret = {**STACK_SECRETS, "DATABASE_URL": database_url, "REDIS_URL": redis_url, "CLERK_JWT_KEY": session_keys[1]}
    secret |= {"SENTRY_DSN": "", "ERMIS_DATABASE_LISTEN_URL": ""}
    parameters = {"SecretArn": create_stack_secret(aws, secret)}
    deploy_stack(aws, TEMPLATE, **parameters)
    assert aws.client("ecs").list_clusters()["clusterArns"] == []
    assert aws.client("elbv2").describe_load_balancers()["LoadBalancers"] == []
    values = stack_values(aws, TEMPLATE, parameters)
    created = apply_what_moto_cloudformation_lacks(aws, values)
    assert not [key for key in created["routes"] if key.endswith("/events")]
    distribution = apply_the_distribution(aws, values)
    assert distribution["CacheBehaviors"]["Quantity"] == 0  # /api/**/events goes to the HTTP API: 404
    assert [origin["Id"] for origin in distribution["Origins"]["Items"]] == ["http-api"]

    deployed = {
        function["Environment"]["Variables"]["ERMIS_AWS_ENTRYPOINT"]: function["Environment"]["Variables"]
        for function in aws.client("lambda").list_functions()["Functions"]
    }
    await add_draft(db, "org_a", "s1")
    set_env(**dict.fromkeys(SECRET_VARIABLES))  # restored after the test, whatever the secret wrote
    forget_loaded_secret()
    site = f"https://{SITE_DOMAIN}"  # CLERK_AUTHORIZED_PARTIES: the site's origin
    member = session_headers(mint_token(org_id="org_a", org_role="org:member", azp=site))
    for file, path in [
        ("api/feed/index.py", "/api/feed"),
        ("api/notifications/index.py", "/api/notifications"),
        ("api/stories/[storyId]/index.py", "/api/stories/s1"),
    ]:
        set_env(**deployed[file])
        event = http_api_v2_event(path, "GET", member)
        if "[storyId]" in file:
            event |= {"pathParameters": {"storyId": "s1"}}
        answer = await invoke_lambda(set_env, file, event)
        assert answer["statusCode"] == 200, (file, answer)

    # Behind the distribution a function's Host is the HTTP API's: the site's own origin is allowed.
    set_env(**deployed["api/admin/rss/refresh.py"])
    cookie = {"cookie": f"__session={mint_token(org_id='org_a', org_role='org:member', azp=site)}"}
    for origin, refused in [(f"https://{SITE_DOMAIN}", False), ("https://elsewhere.example", True)]:
        event = http_api_v2_event("/api/admin/rss/refresh", "POST", {**cookie, "origin": origin})
        answer = await invoke_lambda(set_env, "api/admin/rss/refresh.py", event)
        assert (json.loads(answer["body"])["error"]["code"] == "cross_origin_refused") is refused, answer
    forget_loaded_secret()


def ecs_shape(value: Any, key: str = "") -> Any:
    """CloudFormation's PascalCase properties as the ECS API's camelCase (log options are names)."""
    if isinstance(value, list):
        return [ecs_shape(item) for item in value]
    if isinstance(value, dict) and key != "Options":
        return {name[:1].lower() + name[1:]: ecs_shape(item, name) for name, item in value.items()}
    return value


def apply_the_streams_service(aws: MotoAws, values: StackValues) -> dict[str, Any]:
    """The task definition, service, attributes and scaling, and the load balancer's ingress (moto's
    CloudFormation keeps a rule's CIDR and source group only, not its prefix list), through moto's
    APIs from the template."""
    resources = TEMPLATE["Resources"]
    elb, ecs = aws.client("elbv2"), aws.client("ecs")
    ingress = values.resolve(resources["StreamsLoadBalancerSecurityGroup"]["Properties"])["SecurityGroupIngress"]
    aws.client("ec2").authorize_security_group_ingress(
        GroupId=values.refs["StreamsLoadBalancerSecurityGroup"],
        IpPermissions=[
            {key: rule[key] for key in ("IpProtocol", "FromPort", "ToPort")}
            | {"PrefixListIds": [{"PrefixListId": rule["SourcePrefixListId"]}]}
            for rule in ingress
        ],
    )
    load_balancer = values.resolve(resources["StreamsLoadBalancer"]["Properties"])
    elb.modify_load_balancer_attributes(
        LoadBalancerArn=values.refs["StreamsLoadBalancer"], Attributes=load_balancer["LoadBalancerAttributes"]
    )
    target_group = values.resolve(resources["StreamsTargetGroup"]["Properties"])
    elb.modify_target_group_attributes(
        TargetGroupArn=values.refs["StreamsTargetGroup"], Attributes=target_group["TargetGroupAttributes"]
    )
    definition = ecs.register_task_definition(
        **ecs_shape(values.resolve(resources["StreamsTaskDefinition"]["Properties"]))
    )["taskDefinition"]
    service_props = ecs_shape(values.resolve(resources["StreamsService"]["Properties"]))
    service_props |= {"serviceName": "streams", "taskDefinition": definition["taskDefinitionArn"]}
    service = ecs.create_service(**service_props)["service"]
    values.attributes["StreamsService"] = {"Name": service["serviceName"]}
    autoscaling = aws.client("application-autoscaling")
    target = values.resolve(resources["StreamsScalableTarget"]["Properties"])
    values.refs["StreamsScalableTarget"] = autoscaling.register_scalable_target(**target)["ScalableTargetARN"]
    policy = values.resolve(resources["StreamsScalingPolicy"]["Properties"])
    del policy["ScalingTargetId"]  # the API names the target by these three instead
    autoscaling.put_scaling_policy(
        **policy, **{key: target[key] for key in ("ServiceNamespace", "ResourceId", "ScalableDimension")}
    )
    return service


def cloudfront_shape(value: Any, key: str = "") -> Any:
    """CloudFormation's distribution config as the CloudFront API's: lists as Quantity and Items."""
    renamed = {"OriginSSLProtocols": "OriginSslProtocols", "AcmCertificateArn": "ACMCertificateArn"}
    renamed |= {"SslSupportMethod": "SSLSupportMethod", "OriginCustomHeaders": "CustomHeaders"}
    if isinstance(value, list):
        items = [cloudfront_shape(item) for item in value]
        if key == "AllowedMethods":
            return {"Quantity": len(items), "Items": items, "CachedMethods": {"Quantity": 2, "Items": ["GET", "HEAD"]}}
        return {"Quantity": len(items), "Items": items}
    if isinstance(value, dict):
        shaped = {renamed.get(name, name): cloudfront_shape(item, name) for name, item in value.items()}
        if key == "CustomOriginConfig":
            shaped |= {"HTTPPort": 80, "HTTPSPort": 443}
        return shaped
    return value


def apply_the_distribution(aws: MotoAws, values: StackValues) -> dict[str, Any]:
    """The distribution, after the HTTP API it fronts (``apply_what_moto_cloudformation_lacks``).
    moto has no response-headers policies (no API for them): an id stands in for the template's
    (its content: ``test_every_answer_through_cloudfront_gets_the_edge_headers_hsts_included``
    and cfn-lint, AWS's own schema)."""
    values.refs.setdefault("EdgeResponseHeaders", "edge-headers-policy-id")
    config = values.resolve(TEMPLATE["Resources"]["EdgeDistribution"]["Properties"]["DistributionConfig"])
    shaped = cloudfront_shape(config)
    shaped.setdefault("CacheBehaviors", {"Quantity": 0})
    shaped["CallerReference"] = "ermis"
    created = aws.client("cloudfront").create_distribution(DistributionConfig=shaped)["Distribution"]
    return created["DistributionConfig"]


def test_every_answer_through_cloudfront_gets_the_edge_headers_hsts_included() -> None:
    """The response-headers policy, read back as the headers CloudFront adds (its documented
    meaning of each field), is ``EDGE_HEADERS``; the default behaviour and every stream behaviour use it."""
    config = TEMPLATE["Resources"]["EdgeResponseHeaders"]["Properties"]["ResponseHeadersPolicyConfig"]
    security = config["SecurityHeadersConfig"]
    hsts = security["StrictTransportSecurity"]
    sent = {
        "Content-Security-Policy": security["ContentSecurityPolicy"]["ContentSecurityPolicy"],
        "X-Frame-Options": security["FrameOptions"]["FrameOption"],
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": security["ReferrerPolicy"]["ReferrerPolicy"],
        "Strict-Transport-Security": f"max-age={hsts['AccessControlMaxAgeSec']}"
        + ("; includeSubDomains" if hsts["IncludeSubdomains"] else "")
        + ("; preload" if hsts["Preload"] else ""),
    }
    assert sent == EDGE_HEADERS
    assert all(part["Override"] for part in security.values())
    distribution = TEMPLATE["Resources"]["EdgeDistribution"]["Properties"]["DistributionConfig"]
    behaviours = [distribution["DefaultCacheBehavior"], *distribution["CacheBehaviors"]["Fn::If"][1]]
    assert {json.dumps(b["ResponseHeadersPolicyId"]) for b in behaviours} == {'{"Ref": "EdgeResponseHeaders"}'}


ORIGIN_SECRETS_REFUSED = {
    "empty": "",
    "short": "0123456789abcdef",
    "a wildcard *": "*" + "a" * 40,
    "a wildcard ?": "?" * 40,
    "a space": "correct horse battery staple and more words",
}


@pytest.mark.security
def test_the_origin_secret_must_be_long_and_free_of_the_load_balancer_s_wildcards(tmp_path: Path) -> None:
    """Judged by AWS's own cfn-lint: each value given as the parameter's value (its default, which
    cfn-lint checks against the parameter's MinLength and AllowedPattern as CloudFormation does)
    is refused, and a 64-hex value is not; the parameter has no default of its own."""
    parameter = TEMPLATE["Parameters"]["StreamsOriginSecret"]
    assert "Default" not in parameter
    cases = {**ORIGIN_SECRETS_REFUSED, "good": "0123456789abcdef" * 4}
    paths = {}
    for name, value in cases.items():
        variant = json.loads(json.dumps(TEMPLATE))
        variant["Parameters"]["StreamsOriginSecret"]["Default"] = value
        paths[name] = tmp_path / f"{name.replace(' ', '-').replace('*', 'star').replace('?', 'q')}.json"
        paths[name].write_text(json.dumps(variant))
    linted = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "json", *map(str, paths.values())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    refused = {
        name
        for name, path in paths.items()
        for finding in json.loads(linted.stdout or "[]")
        if finding["Filename"].endswith(path.name) and finding["Rule"]["Id"] == "E2015"
    }
    record("targets", "a CloudFront origin secret that is short, empty or holds a wildcard", tried=len(cases),
           bad=len(refused ^ set(ORIGIN_SECRETS_REFUSED)))  # fmt: skip
    assert refused == set(ORIGIN_SECRETS_REFUSED)
