"""lib.contracts.queue_messages: what each problem is called (the reason an operator reads in the
queue view), strictness, and that a real message of today's producer passes."""

from __future__ import annotations

import pytest

from lib.contracts.queue_messages import (
    DeadLetterMessage,
    InvalidMessage,
    RssQueueMessage,
    SignedRssQueueMessage,
    check_message,
    contract_problems,
)
from lib.queues.signing import sign_message
from tests.support.queue import rss_message


def test_todays_messages_pass(set_env) -> None:
    set_env(ERMIS_QUEUE_SIGNING_SECRET="contract-test")
    assert contract_problems(RssQueueMessage, rss_message("b")) is None
    assert contract_problems(SignedRssQueueMessage, sign_message(rss_message("b"))) is None
    legacy = {**rss_message("b"), "signature": "a" * 64}  # the previous format has no signedAt
    assert contract_problems(SignedRssQueueMessage, legacy) is None


@pytest.mark.parametrize(
    ("payload", "problems"),
    [
        ("not an object", "message: Input should be a valid dictionary"),
        ({**rss_message("b"), "feedUrl": None}, "feedUrl: Input should be a valid string"),
        ({**rss_message("b"), "sourceId": ""}, "sourceId: String should have at least 1 character"),
        (
            {**rss_message("b"), "batchId": 1, "extra": {}},
            "batchId: Input should be a valid string; extra: Extra inputs",
        ),
    ],
)
def test_each_problem_names_its_field_and_never_its_value(payload: object, problems: str) -> None:
    found = contract_problems(RssQueueMessage, payload)
    assert found is not None and found.startswith(problems)
    assert "{}" not in found and "None" not in found


def test_nothing_is_coerced() -> None:
    with pytest.raises(InvalidMessage, match="deliveryCount: Input should be a valid integer"):
        check_message(
            DeadLetterMessage,
            {
                "originalMessageId": "m",
                "originalTopic": "rss.ingest",
                "deliveryCount": "5",
                "failedAt": "2026-12-05T10:00:00.000Z",
                "errorMessage": "boom",
            },
        )
