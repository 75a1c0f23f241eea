"""The cold start's cost of secrets by reference on AWS (``lib.runtime.aws.secrets``): what a
Lambda pays, once per process, to read its secret from Secrets Manager before its function's
module loads — measured against a local moto server (loopback, so the network's share is a
floor: in AWS the call crosses the region's network, a few milliseconds more).

Each round starts three fresh Python processes (cold starts) and times, in each, from the first
import to the function's module loaded (``api/feed/index.py``, as the entry loads it):

- **no secret**: the values already in the environment (what the template did before);
- **by reference**: ``load_secret_environment`` first (boto3 imported, its Secrets Manager
  client made, one ``GetSecretValue``, the values put into the environment) — what the entry does.

The secret's cost is the difference to the first. Reported: medians of ``ROUNDS`` rounds after a
first that warms the page cache.

Run: ``.venv/bin/python -m benchmarks.aws_secret_lookup``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import boto3
from moto.server import ThreadedMotoServer

from lib.bundle import PROJECT_ROOT
from lib.runtime.aws.secrets import SECRET_VARIABLES

ROUNDS = 8
REGION = "eu-north-1"
READS = {
    "no secret": "",
    "by reference": "from lib.runtime.aws.secrets import load_secret_environment; load_secret_environment()",
}
ONE_COLD_START = """
import time
started = time.perf_counter()
{read}
from lib.bundle import PROJECT_ROOT
from lib.runtime.functions import load_function_module
load_function_module(PROJECT_ROOT, "api/feed/index.py")
print(time.perf_counter() - started)
"""


def main() -> None:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        secrets = boto3.client(
            "secretsmanager", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="bench",
            aws_secret_access_key="bench",  # noqa: S106 - moto's, on loopback
        )  # fmt: skip
        values = {name: f"value-of-{name.lower()}" for name in SECRET_VARIABLES} | {"DATABASE_URL": "", "REDIS_URL": ""}
        arn = secrets.create_secret(Name="ermis/bench", SecretString=json.dumps(values))["ARN"]
        env = {name: value for name, value in os.environ.items() if name not in SECRET_VARIABLES}
        env |= {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION,
                "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "ERMIS_SECRET_ARN": arn}  # fmt: skip
        rounds: dict[str, list[float]] = {name: [] for name in READS}
        for _ in range(ROUNDS + 1):
            for name, read in READS.items():
                given = env if read else {**env, **values, "ERMIS_SECRET_ARN": ""}
                ran = subprocess.run([sys.executable, "-c", ONE_COLD_START.format(read=read)], cwd=PROJECT_ROOT,
                                     env=given, capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
                rounds[name].append(float(ran.stdout.strip().splitlines()[-1]))
    finally:
        server.stop()
    base = statistics.median(rounds["no secret"][1:])
    print(f"cold start to the function's module loaded, median of {ROUNDS} (moto on loopback):")
    for name, times in rounds.items():
        median = statistics.median(times[1:])
        print(f"  {name:>12}: {median * 1000:6.1f} ms  (the secret: {(median - base) * 1000:+6.1f} ms)")
    print("  once per cold start; a warm invocation reads nothing")


if __name__ == "__main__":
    main()
