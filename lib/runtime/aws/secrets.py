"""Secrets by reference on AWS: a function's configuration names its secrets, never holds them.

A Lambda's environment is readable by anyone with ``lambda:GetFunctionConfiguration`` (and an
ECS task definition's by ``ecs:DescribeTaskDefinition``); ``NoEcho`` hides a template
parameter, not the environment it lands in. So the AWS template gives each Lambda one variable,
``ERMIS_SECRET_ARN``: the ARN of one Secrets Manager secret whose ``SecretString`` is a JSON
object of ``SECRET_VARIABLES`` (every one present; an optional one as ``""``). At a cold start,
before the function's module is loaded, ``load_secret_environment`` reads the secret once —
one ``GetSecretValue``, which the function's role may call on that ARN only — and
puts its values into this process's environment, where ``lib.settings`` reads every variable;
a variable the environment already has wins (an operator's override, a test). The values stay
for the process's life: a warm invocation asks nothing. The ECS task gets the same values from
the same secret through the task definition's ``Secrets``/``ValueFrom``, which ECS resolves as
the container starts (``lib.ops.aws_streams``).

A secret that cannot be read, is not a JSON object, or lacks a variable fails the cold start
(fail closed), with one line naming the problem, never a value.

The read is boto3's (``get_secret_value``): its import and client cost about 0.2 s of the cold
start, measured (``benchmarks/aws_secret_lookup.py``); a hand-made signed request with
botocore's signer saved 25 ms of that, not worth a protocol written here.
"""

from __future__ import annotations

import json
import os
import time

from lib.lazy_imports import lazy_import
from lib.settings import get_settings

boto3 = lazy_import("boto3")
botocore_exceptions = lazy_import("botocore.exceptions")

SECRET_ARN_VARIABLE = "ERMIS_SECRET_ARN"  # noqa: S105 - a variable's name; its value is an ARN
SECRET_VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "CRON_SECRET",
    "CLERK_JWT_KEY",
    "ERMIS_QUEUE_SIGNING_SECRET",
    "ERMIS_PSEUDONYM_KEY",
    "SENTRY_DSN",
    "ERMIS_DATABASE_LISTEN_URL",
)
# What the streams' tasks take from the secret: they read the database (and the change
# detector's URL), sessions, rate limits and report errors; no cron bearer, no queue key.
STREAM_SECRET_VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "CLERK_JWT_KEY",
    "ERMIS_PSEUDONYM_KEY",
    "SENTRY_DSN",
    "ERMIS_DATABASE_LISTEN_URL",
)

_loaded_in_s: float | None = None


class SecretUnavailable(RuntimeError):
    """The function's secret could not be read into its environment; the message names why."""


def secret_string(arn: str) -> str:
    """``GetSecretValue``'s ``SecretString`` for ``arn``; raises ``SecretUnavailable`` naming the
    error's type (AWS's error code, or the exception's), never its text."""
    try:
        answer = boto3.client("secretsmanager").get_secret_value(SecretId=arn)
    except botocore_exceptions.ClientError as error:
        raise SecretUnavailable(
            _unreadable(str(error.response.get("Error", {}).get("Code") or "ClientError"))
        ) from None
    except (botocore_exceptions.BotoCoreError, OSError) as error:
        raise SecretUnavailable(_unreadable(type(error).__name__)) from None
    return str(answer.get("SecretString") or "")


def _unreadable(why: str) -> str:
    return f"{SECRET_ARN_VARIABLE}: the secret could not be read ({why})"


def load_secret_environment() -> float | None:
    """Read ``ERMIS_SECRET_ARN``'s secret into the environment, once per process; returns how
    long the read took (seconds), ``None`` when there is no secret to read or it was read before."""
    global _loaded_in_s
    arn = os.environ.get(SECRET_ARN_VARIABLE, "").strip()
    if not arn or _loaded_in_s is not None:
        return None
    started = time.perf_counter()
    try:
        values = json.loads(secret_string(arn))
    except ValueError:
        values = None
    if not isinstance(values, dict):
        raise SecretUnavailable(f"{SECRET_ARN_VARIABLE}: the secret's value is not a JSON object")
    missing = [name for name in SECRET_VARIABLES if not isinstance(values.get(name), str)]
    if missing:
        raise SecretUnavailable(f"{SECRET_ARN_VARIABLE}: the secret has no text value for {', '.join(missing)}")
    for name in SECRET_VARIABLES:
        if not os.environ.get(name):
            os.environ[name] = values[name]
    get_settings.cache_clear()
    _loaded_in_s = time.perf_counter() - started
    return _loaded_in_s


def forget_loaded_secret() -> None:
    """Tests: the next ``load_secret_environment`` reads the secret again."""
    global _loaded_in_s
    _loaded_in_s = None
