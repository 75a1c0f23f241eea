"""lib.runtime.aws.http: an API Gateway HTTP API v2 event reaches the function's route."""

from __future__ import annotations

import json

from lib.runtime.aws.http import lambda_handler_for
from tests.support.auth import TEST_CRON_SECRET
from tests.support.contract import CLEANUP_RESPONSE_FIELDS
from tests.support.functions import load_api_app


def http_api_v2_event(path: str, method: str, headers: dict[str, str]) -> dict:
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"host": "abc.execute-api.eu-north-1.amazonaws.com", **headers},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc",
            "domainName": "abc.execute-api.eu-north-1.amazonaws.com",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "t"},
            "requestId": "req-1",
            "routeKey": "$default",
            "stage": "$default",
            "time": "02/Dec/2026:03:00:00 +0000",
            "timeEpoch": 1796180400000,
        },
        "isBase64Encoded": False,
    }


def test_cron_route_answers_through_mangum(db) -> None:
    handler = lambda_handler_for(load_api_app("api/admin/state/cleanup.py"))
    path = "/api/admin/state/cleanup"
    ok = handler(http_api_v2_event(path, "GET", {"authorization": f"Bearer {TEST_CRON_SECRET}"}), None)
    assert ok["statusCode"] == 200
    assert set(json.loads(ok["body"])) == CLEANUP_RESPONSE_FIELDS
    refused = handler(http_api_v2_event(path, "GET", {}), None)
    assert refused["statusCode"] == 401
    assert json.loads(refused["body"])["error"]["code"] == "unauthorized"
