"""scripts/aws-template: derived from vercel.json and the api/ tree, and deployed into moto's
CloudFormation (server mode, loopback): queues with their DLQs and redrive policies, functions
with their timeouts and entry points, the event source mappings; the schedules and the HTTP API,
which moto's CloudFormation does not implement, applied through moto's own Scheduler and API
Gateway v2 APIs with the template's properties."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lib.bundle import PROJECT_ROOT, read_vercel_config
from lib.jobs.schedule import load_crons
from lib.local.routing import discover_routes
from lib.ops.aws_template import aws_cron_expression, build_template
from lib.runtime.aws.secrets import SECRET_VARIABLES
from tests.support.aws import (
    SITE_DOMAIN,
    STACK_SECRETS,
    MotoAws,
    StackValues,
    deploy_stack,
    moto_aws,
    redrive_policy,
    stack_values,
)
from tests.support.security import record

# Expected: moto's CloudFormation names the two resource types it skips (applied below instead).
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS")
TEMPLATE = build_template()
HTTP_FILES = sorted(
    route.file
    for route in discover_routes(PROJECT_ROOT)
    if not route.file.endswith("events.py") and not route.file.startswith("api/queues/")
)


def resources_of(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: body["Properties"] for name, body in template["Resources"].items() if body["Type"] == kind}


@pytest.fixture
def aws(set_env) -> Iterator[MotoAws]:
    with moto_aws(set_env) as running:
        yield running


@pytest.mark.parametrize(
    ("schedule", "expression"),
    [
        ("*/10 * * * *", "cron(*/10 * * * ? *)"),
        ("0 3 * * *", "cron(0 3 * * ? *)"),
        ("30 3 * * *", "cron(30 3 * * ? *)"),
        ("0 9 * * 1-5", "cron(0 9 ? * 2-6 *)"),  # cron's Monday-Friday is AWS's 2-6
        ("15 2 1 * *", "cron(15 2 1 * ? *)"),
    ],
)
def test_cron_expressions_in_aws_form(schedule: str, expression: str) -> None:
    assert aws_cron_expression(schedule) == expression


def test_both_day_fields_cannot_be_expressed() -> None:
    with pytest.raises(ValueError, match="both day of month and day of week"):
        aws_cron_expression("0 0 1 * 1")


def test_the_script_prints_the_template() -> None:
    printed = subprocess.run(
        [str(PROJECT_ROOT / "scripts/aws-template")], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(printed.stdout) == TEMPLATE


def test_aws_cloudformation_linter_finds_nothing(tmp_path: Path) -> None:
    """cfn-lint, AWS's own, checks what moto's CloudFormation accepts without looking: every
    property against its resource's schema (a security group's description may not hold an
    apostrophe), every ``Fn::GetAtt`` name, the rules and conditions."""
    path = tmp_path / "template.json"
    path.write_text(json.dumps(TEMPLATE))
    linted = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    findings = [
        f"{item['Rule']['Id']} {item['Location']['Path']}: {item['Message']}" for item in json.loads(linted.stdout)
    ]
    assert findings == [], "\n".join(findings)


def test_a_cron_and_a_queue_added_to_vercel_json_appear_with_no_other_edit(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECT_ROOT / "api", project / "api")
    shutil.copy(project / "api/admin/state/cleanup.py", project / "api/admin/state/vacuum.py")
    config = read_vercel_config()
    config["crons"].append({"path": "/api/admin/state/vacuum", "schedule": "45 4 * * 0"})
    config["crons"].append({"path": "/api/admin/state/cleanup", "schedule": "0 15 * * *"})
    config["functions"]["api/feature-flags.py"] = {
        "experimentalTriggers": [{"type": "queue/v2beta", "topic": "flags-changed"}]
    }
    (project / "vercel.json").write_text(json.dumps(config))
    template = build_template(project)
    expressions = sorted(
        props["ScheduleExpression"] for props in resources_of(template, "AWS::Scheduler::Schedule").values()
    )
    assert {"cron(45 4 ? * 1 *)", "cron(0 15 * * ? *)"} <= set(expressions) and len(expressions) == 7
    vacuum = resources_of(template, "AWS::Scheduler::Schedule")["StateVacuumSchedule"]
    assert vacuum["Target"]["Arn"] == {"Fn::GetAtt": ["ApiAdminStateVacuumFunction", "Arn"]}
    assert "ApiAdminStateVacuumFunction" in template["Resources"]
    queues = {props["QueueName"]["Fn::Sub"] for props in resources_of(template, "AWS::SQS::Queue").values()}
    assert {"${AWS::StackName}-flags-changed", "${AWS::StackName}-flags-changed-dlq"} <= queues
    mappings = resources_of(template, "AWS::Lambda::EventSourceMapping")
    assert {"Ref": "ApiFeatureFlagsFunction"} in [props["FunctionName"] for props in mappings.values()]


@pytest.mark.security
def test_the_template_deploys_into_cloudformation(aws: MotoAws) -> None:
    outputs = deploy_stack(aws, TEMPLATE)
    sqs, functions = aws.client("sqs"), aws.client("lambda")

    triggers = {
        file: trigger["topic"]
        for file, settings in read_vercel_config()["functions"].items()
        for trigger in settings.get("experimentalTriggers", [])
    }
    queue_urls = {url.rsplit("/", 1)[-1]: url for url in sqs.list_queues()["QueueUrls"]}
    for topic in triggers.values():
        url = queue_urls[f"ermis-{topic}"]
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert attributes["VisibilityTimeout"] == "300"
        policy = redrive_policy(sqs, url)
        assert policy["maxReceiveCount"] == 5
        dlq_arn = sqs.get_queue_attributes(QueueUrl=queue_urls[f"ermis-{topic}-dlq"], AttributeNames=["QueueArn"])
        assert policy["deadLetterTargetArn"] == dlq_arn["Attributes"]["QueueArn"]
        assert f"/ermis-{topic}" in [output[output.rfind("/") :] for output in outputs.values()]

    deployed = {
        function["Environment"]["Variables"]["ERMIS_AWS_ENTRYPOINT"]: function
        for function in functions.list_functions()["Functions"]
    }
    assert sorted(deployed) == sorted(HTTP_FILES + list(triggers))  # every api/ file but the streams
    durations = read_vercel_config()["functions"]
    for file, function in deployed.items():
        assert function["Runtime"] == "python3.12" and function["Handler"] == "lib.runtime.aws.entry.handler"
        assert function["Timeout"] == durations.get(file, {}).get("maxDuration", 60)
        assert function["Environment"]["Variables"]["ERMIS_QUEUE_TRANSPORT"] == "sqs"
        assert function["Environment"]["Variables"]["ERMIS_SQS_QUEUE_URL_RSS_INGEST"].endswith("/ermis-rss-ingest")
    secret_arn = aws.client("secretsmanager").describe_secret(SecretId="ermis/functions")["ARN"]
    leaks = []
    for function in deployed.values():  # what lambda:GetFunctionConfiguration shows anyone allowed it
        shown = json.dumps(functions.get_function_configuration(FunctionName=function["FunctionName"]))
        leaks += [(function["FunctionName"], name) for name, value in STACK_SECRETS.items() if value in shown]
    case = "every Lambda's get-function-configuration, for any of the secret's values"
    record("deployed configuration", case, tried=len(deployed), bad=len(leaks))
    assert leaks == []
    for function in deployed.values():
        variables = function["Environment"]["Variables"]
        assert variables["ERMIS_SECRET_ARN"] == secret_arn and not set(SECRET_VARIABLES) & set(variables)
        assert (variables["ERMIS_ENV"], variables["CLERK_AUTHORIZED_PARTIES"]) == (
            "production",
            f"https://{SITE_DOMAIN}",
        )
    mappings = functions.list_event_source_mappings()["EventSourceMappings"]
    by_function = {mapping["FunctionArn"]: mapping for mapping in mappings}
    for file, topic in triggers.items():
        mapping = by_function[deployed[file]["FunctionArn"]]
        assert mapping["EventSourceArn"].endswith(f":ermis-{topic}") and mapping["BatchSize"] == 10
        assert deployed[file]["Environment"]["Variables"]["ERMIS_AWS_QUEUE_TOPIC"] == topic

    created = apply_what_moto_cloudformation_lacks(aws, stack_values(aws, TEMPLATE, {}))
    schedules = {
        schedule["Name"]: aws.client("scheduler").get_schedule(Name=schedule["Name"])
        for schedule in aws.client("scheduler").list_schedules()["Schedules"]
    }
    for entry in load_crons():
        schedule = schedules[f"ermis-{entry.name}"]
        assert schedule["ScheduleExpression"] == aws_cron_expression(entry.schedule)
        assert schedule["ScheduleExpressionTimezone"] == "UTC"
        assert json.loads(schedule["Target"]["Input"]) == {"ermisCron": entry.path}
        target = next(fn for fn in deployed.values() if fn["FunctionArn"] == schedule["Target"]["Arn"])
        assert target["Environment"]["Variables"]["ERMIS_AWS_ENTRYPOINT"] == f"api{entry.path.removeprefix('/api')}.py"
    assert sorted(created["routes"]) == sorted(
        f"ANY {route.pattern}" for route in discover_routes(PROJECT_ROOT) if route.file in HTTP_FILES
    )


def test_the_functions_may_read_their_secret_and_nothing_else_of_secrets_manager() -> None:
    [statement] = [
        statement
        for policy in TEMPLATE["Resources"]["FunctionRole"]["Properties"]["Policies"]
        for statement in policy["PolicyDocument"]["Statement"]
        if "secretsmanager" in json.dumps(statement["Action"])
    ]
    assert (statement["Action"], statement["Resource"]) == ("secretsmanager:GetSecretValue", {"Ref": "SecretArn"})


def test_a_deployment_s_parameters_take_the_secret_s_arn_not_its_values() -> None:
    parameters = TEMPLATE["Parameters"]
    assert not set(SECRET_VARIABLES) & {spec.get("Description", "").split(":")[0] for spec in parameters.values()}
    assert "Default" not in parameters["SecretArn"]
    assert [name for name, spec in parameters.items() if spec.get("NoEcho")] == ["StreamsOriginSecret"]


def apply_what_moto_cloudformation_lacks(aws: MotoAws, values: StackValues) -> dict[str, list[str]]:
    """moto's CloudFormation skips ``AWS::Scheduler::Schedule`` and ``AWS::ApiGatewayV2::*``;
    create them through moto's own APIs from the template's properties, with the stack's
    physical ids for ``Ref`` and ``Fn::GetAtt``, so their values are at least accepted by those APIs."""
    for props in resources_of(TEMPLATE, "AWS::Scheduler::Schedule").values():
        aws.client("scheduler").create_schedule(**values.resolve(props))
    gateway = aws.client("apigatewayv2")
    values.refs["HttpApi"] = gateway.create_api(**values.resolve(TEMPLATE["Resources"]["HttpApi"]["Properties"]))[
        "ApiId"
    ]
    for logical, props in resources_of(TEMPLATE, "AWS::ApiGatewayV2::Integration").items():
        values.refs[logical] = gateway.create_integration(**values.resolve(props))["IntegrationId"]
    routes = resources_of(TEMPLATE, "AWS::ApiGatewayV2::Route").values()
    return {"routes": [gateway.create_route(**values.resolve(props))["RouteKey"] for props in routes]}
