"""The pipeline end to end on the embedded queue: the refresh publishes one signed rss.ingest
message, the ingest consumer builds (or acks without work when the flag is off), a reserved
stage fails loudly onto its DLQ; provisioning, region and in-process dispatch."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from vercel.headers import HeadersContext

from lib.contracts.queue_messages import InvalidMessage
from lib.platform.flags import set_feature_flag
from lib.queues import publish as publish_module
from lib.queues.client import QueueNotProvisioned, get_queue_region, is_queues_provisioned, uses_queue_service
from lib.queues.consumer import retry_delay_seconds
from lib.queues.publish import idempotency_key, publish_message, publish_rss_aggregation_refresh
from lib.queues.signing import verify_message
from tests.support.catalogs import set_catalog
from tests.support.feeds import FeedServer, rss
from tests.support.functions import load_api_app
from tests.support.queue import EmbeddedQueue, embedded_queue, rss_message

INGEST = load_api_app("api/queues/rss/ingest.py")
ENRICH = load_api_app("api/queues/rss/enrich.py")
# The names `vercel build` writes into each consumer's .vc-config.json (CONTRACTS §5).
INGEST_CONSUMER, ENRICH_CONSUMER = "api_Squeues_Srss_Singest_Dpy", "api_Squeues_Srss_Senrich_Dpy"
NO_QUEUE_TOKEN = {"VERCEL": None, "VERCEL_OIDC_TOKEN": None, "VERCEL_QUEUE_API_TOKEN": None, "VERCEL_QUEUE_TOKEN": None}


@pytest.fixture
def queue(set_env, redis) -> Iterator[EmbeddedQueue]:
    set_env(ERMIS_QUEUE_SIGNING_SECRET="pipeline-test-secret")
    with embedded_queue(set_env) as embedded:
        yield embedded


def test_provisioning_and_region(set_env) -> None:
    set_env(**NO_QUEUE_TOKEN, VERCEL_REGION=None)
    assert not is_queues_provisioned() and not uses_queue_service() and get_queue_region() == "iad1"
    set_env(VERCEL_OIDC_TOKEN="  ")
    assert not is_queues_provisioned()
    set_env(VERCEL_OIDC_TOKEN="oidc", VERCEL_REGION="arn1")
    assert is_queues_provisioned() and get_queue_region() == "arn1"
    for variable in ("VERCEL_QUEUE_API_TOKEN", "VERCEL_QUEUE_TOKEN"):
        set_env(**{**NO_QUEUE_TOKEN, variable: "token"})
        assert is_queues_provisioned(), variable


def test_on_vercel_the_token_of_the_request_provisions_the_queue(set_env) -> None:
    request_headers = HeadersContext({"x-vercel-oidc-token": "header.oidc.token"})
    set_env(**NO_QUEUE_TOKEN)
    with request_headers.use():
        assert not is_queues_provisioned()  # off the platform a request header is not a credential
    set_env(VERCEL="1")
    assert not is_queues_provisioned() and uses_queue_service()
    with request_headers.use():
        assert is_queues_provisioned()
    with HeadersContext({"x-vercel-oidc-token": " "}).use():
        assert not is_queues_provisioned()


async def test_on_vercel_without_any_token_publishing_raises(db, set_env) -> None:
    set_env(**{**NO_QUEUE_TOKEN, "VERCEL": "1", "ERMIS_QUEUE_SIGNING_SECRET": "s"})
    with pytest.raises(QueueNotProvisioned, match="x-vercel-oidc-token"):
        await publish_message("rss.cluster", rss_message("c-0"))


def test_idempotency_key_has_the_spec_form() -> None:
    message = {"batchId": "b-1", "sourceId": "all-sources", "feedUrl": ""}
    key = idempotency_key("rss.ingest", message)
    assert key.startswith("rss.ingest:b-1:")
    # {"batchId":"b-1",...} with every non-alphanumeric as _
    assert key.split(":", 2)[2] == "__batchId___b_1___sourceId___all_sources___feedUrl_____"


async def test_the_refresh_publishes_one_signed_all_sources_message(db, queue: EmbeddedQueue) -> None:
    batch_id = await publish_rss_aggregation_refresh()
    [message] = queue.payloads("rss-ingest")
    assert message["batchId"] == batch_id
    assert (message["sourceId"], message["feedUrl"]) == ("all-sources", "")
    assert message["batchId"] and verify_message(message)
    assert queue.messages("rss-ingest")[0].idempotency_key.startswith(f"rss.ingest:{message['batchId']}:")


async def test_the_ingest_consumer_builds_the_global_catalog_when_the_flag_is_on(
    db, queue: EmbeddedQueue, feed_server: FeedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    feed_server.feeds["w"] = rss("W", [("Earthquake in Chile", "https://w/1", "Big.")])
    await set_catalog(db, "default", [feed_server.url("w")])
    await set_feature_flag("rssQueuePipeline", True)
    await publish_rss_aggregation_refresh()
    [response] = await queue.push("rss-ingest", INGEST, "/api/queues/rss/ingest", INGEST_CONSUMER)
    assert response.status_code == 200
    assert feed_server.fetches["w"] == 1
    assert "running aggregation refresh batch=" in capsys.readouterr().err
    assert queue.messages("rss-ingest")[0].acknowledged


async def test_a_message_in_flight_when_the_flag_goes_off_is_acked_without_a_build(
    db, queue: EmbeddedQueue, feed_server: FeedServer
) -> None:
    feed_server.feeds["w"] = rss("W", [("Earthquake in Chile", "https://w/1", "Big.")])
    await set_catalog(db, "default", [feed_server.url("w")])
    await publish_rss_aggregation_refresh()  # published while on; the flag is off at delivery
    [response] = await queue.push("rss-ingest", INGEST, "/api/queues/rss/ingest", INGEST_CONSUMER)
    assert response.status_code == 200
    assert feed_server.total_fetches() == 0
    assert queue.messages("rss-ingest")[0].acknowledged


async def test_a_reserved_stage_fails_loudly_and_ends_on_its_dlq(
    db, queue: EmbeddedQueue, capsys: pytest.CaptureFixture[str]
) -> None:
    await publish_message("rss.enrich", {**rss_message("e-1"), "sourceId": "s", "feedUrl": "https://f"})
    for delivery in range(1, 6):
        await queue.push("rss-enrich", ENRICH, "/api/queues/rss/enrich", ENRICH_CONSUMER)
        queue.advance(retry_delay_seconds(delivery))
    [dead] = queue.payloads("rss-enrich-dlq")
    assert dead["deliveryCount"] == 5 and dead["originalTopic"] == "rss.enrich"
    assert "rss.enrich consumer is not implemented; do not enable a producer for this topic" in dead["errorMessage"]
    assert queue.messages("rss-enrich")[0].acknowledged
    errors = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert len(errors) == 5


async def test_the_queue_view_shows_dead_letters_and_the_other_backlogs(db, queue: EmbeddedQueue, mint_token) -> None:
    from lib.platform.ai_ledger_retry import enqueue_ai_ledger_retry
    from tests.support.auth import session_headers
    from tests.support.functions import client_for

    await publish_message("rss.enrich", rss_message("e-2"))
    for delivery in range(1, 6):
        await queue.push("rss-enrich", ENRICH, "/api/queues/rss/enrich", ENRICH_CONSUMER)
        queue.advance(retry_delay_seconds(delivery))
    await enqueue_ai_ledger_retry({"id": "u-1"})
    await db.execute("INSERT INTO ai_usage_metering_outbox (event, status, attempt_count) VALUES ('{}', 'failed', 5)")
    view = load_api_app("api/admin/queues.py")
    async with client_for(view) as client:
        assert (
            await client.get("/api/admin/queues", headers=session_headers(mint_token(platform_role="billing")))
        ).status_code == 403
        body = (await client.get("/api/admin/queues", headers=session_headers(mint_token(platform_role="ops")))).json()
    topics = {topic["topic"]: topic for topic in body["pipeline"]["topics"]}
    assert topics["rss.enrich"]["deadLetters"] == 1 and topics["rss.ingest"]["deadLetters"] == 0
    assert topics["rss.enrich"]["deadLetterTopic"] == "rss-enrich-dlq"
    [latest] = body["pipeline"]["latestDeadLetters"]
    assert "not implemented" in latest["errorMessage"] and latest["deliveryCount"] == 5
    assert body["aiLedgerRetry"] == {"queued": 1, "processing": 0, "deadLettered": 0}
    assert body["meteringOutbox"]["failed"] == 1 and body["meteringOutbox"]["exhausted"] == 1


async def test_unprovisioned_publishing_dispatches_in_process_or_drops(
    db, set_env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_env(**NO_QUEUE_TOKEN, ERMIS_QUEUE_SIGNING_SECRET="s")
    seen: list[tuple[dict, int]] = []

    async def handler(message: dict, metadata) -> None:
        seen.append((message, metadata.delivery_count))

    monkeypatch.setitem(publish_module._in_process_handlers, "rss.cluster", handler)
    assert await publish_message("rss.cluster", rss_message("c-1")) == "dispatched"
    assert seen[0][0]["batchId"] == "c-1" and verify_message(seen[0][0]) and seen[0][1] == 1
    monkeypatch.delitem(publish_module._in_process_handlers, "rss.cluster")
    assert await publish_message("rss.cluster", rss_message("c-2")) == "dropped"
    assert (
        "[queues:rss.cluster] no queue provisioned and no in-process handler; message dropped"
        in capsys.readouterr().err
    )


async def test_an_unprovisioned_consumer_route_answers_204(db, set_env) -> None:
    from tests.support.functions import client_for

    set_env(**NO_QUEUE_TOKEN)
    async with client_for(INGEST) as client:
        response = await client.post("/api/queues/rss/ingest", content=b"{}")
    assert response.status_code == 204


async def test_a_push_for_another_consumer_name_is_refused_and_logged(
    db, queue: EmbeddedQueue, capsys: pytest.CaptureFixture[str]
) -> None:
    await publish_rss_aggregation_refresh()
    [response] = await queue.push("rss-ingest", INGEST, "/api/queues/rss/ingest", "rss-ingest")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "consumer_mismatch"
    assert INGEST_CONSUMER in error["message"] and "names rss-ingest" in error["message"]
    assert "push for another consumer" in capsys.readouterr().err
    assert not queue.messages("rss-ingest")[0].acknowledged


def test_a_reserved_consumer_does_not_load_the_aggregation_build_at_cold_start() -> None:
    import subprocess
    import sys

    from lib.local.paths import PROJECT_ROOT

    probe = (
        "import sys\n"
        "from lib.runtime.functions import load_function_app\n"
        "from lib.local.paths import PROJECT_ROOT\n"
        "load_function_app(PROJECT_ROOT, 'api/queues/rss/enrich.py')\n"
        "print(sorted(m for m in ('feedparser', 'lib.platform.aggregation.stories') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"batchId": "x"}, "sourceId: Field required"),
        ({**rss_message("x"), "requestedAt": "yesterday"}, "requestedAt: String should match pattern"),
        ({**rss_message("x"), "score": 0.5}, "score: Extra inputs are not permitted"),
        ({**rss_message("x"), "batchId": 7}, "batchId: Input should be a valid string"),
    ],
)
async def test_a_message_outside_its_topics_contract_is_never_published(
    db, queue: EmbeddedQueue, message: dict, problem: str
) -> None:
    with pytest.raises(InvalidMessage, match=problem):
        await publish_message("rss.ingest", message)
    assert queue.messages("rss-ingest") == []
