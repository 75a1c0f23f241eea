"""lib.runtime.aws.secrets, against moto's Secrets Manager (server mode, loopback): a cold start
reads the function's secret by its ARN, once, into the environment, and the function runs on
what it read; a secret that cannot be read, is not JSON or lacks a variable fails the start with
a line naming the problem and none of the values."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from lib.runtime.aws.secrets import (
    SECRET_ARN_VARIABLE,
    SECRET_VARIABLES,
    SecretUnavailable,
    forget_loaded_secret,
    load_secret_environment,
    secret_string,
)
from lib.settings import get_settings
from tests.support.auth import TEST_CRON_SECRET
from tests.support.aws import STACK_SECRETS, MotoAws, invoke_lambda, moto_aws


@pytest.fixture
def aws(set_env) -> Iterator[MotoAws]:
    set_env(**dict.fromkeys(SECRET_VARIABLES))  # whatever the secret writes is undone after the test
    forget_loaded_secret()
    with moto_aws(set_env) as running:
        yield running
    forget_loaded_secret()


def secret_arn(aws: MotoAws, value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return aws.client("secretsmanager").create_secret(Name="ermis/test", SecretString=text)["ARN"]


async def test_a_cold_start_runs_on_the_secret_moto_holds(aws: MotoAws, db, set_env, database_url: str) -> None:
    """The cron's function has nothing but the secret's ARN: it reaches Postgres with the secret's
    DATABASE_URL and authorises its scheduled run with the secret's CRON_SECRET."""
    values = {**STACK_SECRETS, "DATABASE_URL": database_url, "CRON_SECRET": TEST_CRON_SECRET, "REDIS_URL": ""}
    set_env(**{SECRET_ARN_VARIABLE: secret_arn(aws, values | {"SENTRY_DSN": ""})})
    assert os.environ.get("DATABASE_URL") is None and os.environ.get("CRON_SECRET") is None
    answer = await invoke_lambda(set_env, "api/admin/state/cleanup.py", {"ermisCron": "/api/admin/state/cleanup"})
    assert "processedAt" in answer
    [run] = await (await db.execute("SELECT job, status FROM cron_runs")).fetchall()
    assert tuple(run) == ("state-cleanup", "succeeded")
    assert os.environ["ERMIS_PSEUDONYM_KEY"] == STACK_SECRETS["ERMIS_PSEUDONYM_KEY"]


async def test_the_secret_is_read_once_per_process_and_the_environment_wins(aws: MotoAws, set_env) -> None:
    set_env(**{SECRET_ARN_VARIABLE: secret_arn(aws, STACK_SECRETS), "CRON_SECRET": "set-by-the-operator"})
    took = load_secret_environment()
    assert took is not None and took > 0  # the cold start's cost (benchmarks/cold_start.py times it)
    assert os.environ["CRON_SECRET"] == "set-by-the-operator"
    assert get_settings().database_url.get_secret_value() == STACK_SECRETS["DATABASE_URL"]
    aws.client("secretsmanager").delete_secret(SecretId="ermis/test", ForceDeleteWithoutRecovery=True)
    assert load_secret_environment() is None  # a warm process asks nothing (the secret is gone now)


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        ("not json " + STACK_SECRETS["CRON_SECRET"], "not a JSON object"),
        (["a", "list"], "not a JSON object"),
        (
            {name: value for name, value in STACK_SECRETS.items() if name != "CLERK_JWT_KEY"},
            "no text value for CLERK_JWT_KEY",
        ),
        ({**STACK_SECRETS, "SENTRY_DSN": None}, "no text value for SENTRY_DSN"),
        (None, "could not be read (ResourceNotFoundException)"),
    ],
)
def test_a_secret_that_cannot_serve_fails_the_start_naming_why_and_no_value(
    aws: MotoAws, set_env, stored: object, reason: str
) -> None:
    arn = (
        secret_arn(aws, stored)
        if stored is not None
        else "arn:aws:secretsmanager:eu-north-1:123456789012:secret:gone-a1B2c3"
    )
    set_env(**{SECRET_ARN_VARIABLE: arn})
    with pytest.raises(SecretUnavailable) as raised:
        load_secret_environment()
    assert reason in str(raised.value)
    assert not [value for value in STACK_SECRETS.values() if value in str(raised.value)]
    assert all(os.environ.get(name) is None for name in SECRET_VARIABLES)  # nothing half-loaded


def test_the_read_answers_as_boto3_does(aws: MotoAws) -> None:
    """The read against boto3's client made directly, on the same secret: the same text, and the
    error's code named for a secret that does not exist."""
    stored = json.dumps({"DATABASE_URL": "postgresql://é:p%40ss@db/ermis", "quote": '"\\'})
    arn = secret_arn(aws, stored)
    assert secret_string(arn) == aws.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"] == stored
    gone = arn.replace("ermis/test", "ermis/none")
    with pytest.raises(aws.client("secretsmanager").exceptions.ResourceNotFoundException):
        aws.client("secretsmanager").get_secret_value(SecretId=gone)
    with pytest.raises(SecretUnavailable, match=r"\(ResourceNotFoundException\)"):
        secret_string(gone)
