"""The pipeline on SQS, against moto in server mode with the queues the template creates: a
refresh tick publishes to SQS and the consumer Lambda's handler, fed the records moto returns,
runs it; five failures end in the DLQ queue (the queue's redrive policy) and in
queue_dead_letters; forgeries are acknowledged without work; a duplicate delivery during a slow
run does the work once; a partial batch retries only its failed record; and a misconfigured
transport fails loud and acknowledges nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from lib.db.state_store import get_state
from lib.ops.aws_template import build_template
from lib.queues.client import QueueNotProvisioned
from lib.queues.consumer import ConsumerOptions, create_queue_consumer, registered_consumers
from lib.queues.handlers import LAST_INGEST_RUN_KEY
from lib.queues.publish import MessageMetadata, publish_message
from lib.queues.signing import sign_message
from lib.queues.telemetry import read_topic_telemetry
from lib.runtime.aws.sqs import handle_sqs_event
from lib.settings import Settings
from tests.support.auth import cron_headers
from tests.support.aws import MotoAws, deploy_stack, invoke_lambda, moto_aws, receive, sqs_event
from tests.support.functions import client_for, load_api_app
from tests.support.queue import rss_message

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS")
TEMPLATE = build_template()


@pytest.fixture
def aws(set_env, db, redis) -> Iterator[MotoAws]:
    with moto_aws(set_env) as running:
        deploy_stack(running, TEMPLATE, QueueConsumersEnabled="false")  # the test plays Lambda's poller
        [ingest] = [
            fn["Environment"]["Variables"]
            for fn in running.client("lambda").list_functions()["Functions"]
            if fn["Environment"]["Variables"]["ERMIS_AWS_ENTRYPOINT"] == "api/queues/rss/ingest.py"
        ]
        queue_variables = {name: value for name, value in ingest.items() if name.startswith("ERMIS_SQS_QUEUE_URL_")}
        set_env(ERMIS_QUEUE_TRANSPORT="sqs", ERMIS_QUEUE_SIGNING_SECRET="sqs-test-secret", **queue_variables)
        yield running


def queue_url(wire_topic: str) -> str:
    return Settings().sqs_queue_url(wire_topic) or ""


def queue_arn(aws: MotoAws, wire_topic: str) -> str:
    attributes = aws.client("sqs").get_queue_attributes(QueueUrl=queue_url(wire_topic), AttributeNames=["QueueArn"])
    return attributes["Attributes"]["QueueArn"]


async def test_a_refresh_tick_publishes_to_sqs_and_the_consumer_lambda_runs_it(aws: MotoAws, db, set_env) -> None:
    await db.execute("INSERT INTO feature_flag_values (flag_key, enabled) VALUES ('rssQueuePipeline', true)")
    async with client_for(load_api_app("api/admin/rss/refresh.py")) as client:
        tick = (await client.get("/api/admin/rss/refresh", headers=cron_headers())).json()
    assert (tick["published"], tick["inlineRefreshed"]) == (True, False)
    sqs = aws.client("sqs")
    [message] = receive(sqs, queue_url("rss-ingest"))
    assert json.loads(message["Body"])["batchId"] == tick["batchId"]

    answer = await invoke_lambda(
        set_env, "api/queues/rss/ingest.py", sqs_event([message], queue_arn(aws, "rss-ingest")), "rss-ingest"
    )
    assert answer == {"batchItemFailures": []}
    assert (await get_state(LAST_INGEST_RUN_KEY))["batchId"] == tick["batchId"]
    counted = (await read_topic_telemetry())["rss.ingest"]
    assert (counted["published"], counted["deliveries"], counted["successes"]) == (1, 1, 1)


async def test_five_failures_end_in_the_dlq_queue_and_in_postgres(aws: MotoAws, db, set_env) -> None:
    """rss.enrich is a reserved stage: its consumer fails every delivery."""
    await publish_message("rss.enrich", rss_message("doomed"))
    sqs, url, arn = aws.client("sqs"), queue_url("rss-enrich"), queue_arn(aws, "rss-enrich")
    for attempt in range(1, 6):
        [message] = receive(sqs, url)
        assert message["Attributes"]["ApproximateReceiveCount"] == str(attempt)
        answer = await invoke_lambda(set_env, "api/queues/rss/enrich.py", sqs_event([message], arn), "rss-enrich")
        assert answer == {"batchItemFailures": [{"itemIdentifier": message["MessageId"]}]}
        if attempt < 5:
            assert receive(sqs, url) == []  # backing off: invisible for retry_delay_seconds(attempt)
            # The backoff elapses (without waiting 2 + 4 + 8 + 16 s for real).
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    assert receive(sqs, url) == []  # the sixth receive moves it to the DLQ instead
    [dead] = receive(sqs, queue_url("rss-enrich").replace("rss-enrich", "rss-enrich-dlq"))
    assert json.loads(dead["Body"])["batchId"] == "doomed"
    rows = await (await db.execute("SELECT topic, delivery_count, payload FROM queue_dead_letters")).fetchall()
    assert [(row[0], row[1], row[2]["batchId"]) for row in rows] == [("rss.enrich", 5, "doomed")]
    counted = (await read_topic_telemetry())["rss.enrich"]
    assert (counted["retries"], counted["deadLetters"]) == (4, 1)


async def test_a_forged_message_is_acknowledged_without_work(aws: MotoAws, set_env) -> None:
    sqs = aws.client("sqs")
    forged = {**sign_message(rss_message("b1")), "batchId": "someone-else"}
    sqs.send_message(QueueUrl=queue_url("rss-ingest"), MessageBody=json.dumps(forged))
    sqs.send_message(QueueUrl=queue_url("rss-ingest"), MessageBody="not even JSON")
    messages = receive(sqs, queue_url("rss-ingest"))
    answer = await invoke_lambda(
        set_env, "api/queues/rss/ingest.py", sqs_event(messages, queue_arn(aws, "rss-ingest")), "rss-ingest"
    )
    assert answer == {"batchItemFailures": []}  # acknowledged: retrying a forgery is pointless
    assert await get_state(LAST_INGEST_RUN_KEY) is None
    assert (await read_topic_telemetry())["rss.ingest"]["rejected"] == 2


calls: list[str] = []
slow = {"seconds": 0.0}


async def slow_or_failing(message: dict, _metadata: MessageMetadata) -> None:
    calls.append(message["batchId"])
    await asyncio.sleep(slow["seconds"])
    if message["batchId"].startswith("bad"):
        raise RuntimeError("this record is bad")


@pytest.fixture
def cluster_consumer(aws: MotoAws):
    calls.clear()
    slow["seconds"] = 0.0
    create_queue_consumer("rss.cluster", slow_or_failing, ConsumerOptions(), module_file=__file__)
    return next(consumer for consumer in registered_consumers() if consumer.handler is slow_or_failing)


async def test_the_same_message_delivered_twice_during_a_slow_run_does_the_work_once(
    aws: MotoAws, cluster_consumer
) -> None:
    sqs, url, arn = aws.client("sqs"), queue_url("rss-cluster"), queue_arn(aws, "rss-cluster")
    await publish_message("rss.cluster", rss_message("slow-batch"))
    # The first receive's visibility lapses while its run is still going: SQS delivers it again.
    [first] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, AttributeNames=["All"])["Messages"]
    [second] = receive(sqs, url)
    assert first["MessageId"] == second["MessageId"] and second["Attributes"]["ApproximateReceiveCount"] == "2"
    slow["seconds"] = 0.5
    answers = await asyncio.gather(
        handle_sqs_event(cluster_consumer, sqs_event([first], arn)),
        handle_sqs_event(cluster_consumer, sqs_event([second], arn)),
    )
    assert calls == ["slow-batch"]
    # Whichever delivery claims the batch first does the work; the other is held, to come back
    # after the lease (both carry the one message id).
    ran, held = sorted(answers, key=lambda answer: len(answer["batchItemFailures"]))
    assert ran == {"batchItemFailures": []}
    assert held == {"batchItemFailures": [{"itemIdentifier": second["MessageId"]}]}
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=0)
    [third] = receive(sqs, url)
    assert await handle_sqs_event(cluster_consumer, sqs_event([third], arn)) == {"batchItemFailures": []}
    assert calls == ["slow-batch"]  # the batch ran: acknowledged without work


async def test_a_partial_batch_failure_retries_only_the_failed_record(aws: MotoAws, cluster_consumer) -> None:
    sqs, url, arn = aws.client("sqs"), queue_url("rss-cluster"), queue_arn(aws, "rss-cluster")
    for batch in ("good-1", "bad-1", "good-2"):
        await publish_message("rss.cluster", rss_message(batch))
    messages = receive(sqs, url)
    assert len(messages) == 3
    answer = await handle_sqs_event(cluster_consumer, sqs_event(messages, arn))
    bad = next(m["MessageId"] for m in messages if json.loads(m["Body"])["batchId"] == "bad-1")
    assert answer == {"batchItemFailures": [{"itemIdentifier": bad}]}
    assert sorted(calls) == ["bad-1", "good-1", "good-2"]


async def test_sqs_without_a_queue_url_fails_loud_and_acknowledges_nothing(
    aws: MotoAws, cluster_consumer, set_env
) -> None:
    sqs, url, arn = aws.client("sqs"), queue_url("rss-cluster"), queue_arn(aws, "rss-cluster")
    await publish_message("rss.cluster", rss_message("bad-2"))
    messages = receive(sqs, url)
    set_env(ERMIS_SQS_QUEUE_URL_RSS_CLUSTER=None, ERMIS_SQS_QUEUE_URL_RSS_INGEST=None)
    with pytest.raises(QueueNotProvisioned, match="ERMIS_SQS_QUEUE_URL_RSS_INGEST"):
        await publish_message("rss.ingest", rss_message("b"))
    # The handler fails and its backoff cannot be set (no queue URL): reported, never acknowledged.
    answer = await handle_sqs_event(cluster_consumer, sqs_event(messages, arn))
    assert answer == {"batchItemFailures": [{"itemIdentifier": messages[0]["MessageId"]}]}
