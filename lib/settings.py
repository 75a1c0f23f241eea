"""Every environment variable of the bundle, read in one place (CONTRACTS §3).

``get_settings()`` parses the environment once per process, which is what a warm serverless
instance wants; tests that change the environment call ``get_settings.cache_clear()``.
Secrets are ``SecretStr`` so they never print by accident, and ``secret_values()`` lists them
for the log redactor in ``lib.observability``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore", env_ignore_empty=True)

    database_url: SecretStr | None = None
    ermis_database_listen_url: SecretStr | None = None
    db_pool_max_size: int = Field(default=4, ge=1, validation_alias="ERMIS_DB_POOL_MAX_SIZE")
    db_connect_timeout_s: float = Field(default=5.0, gt=0, validation_alias="ERMIS_DB_CONNECT_TIMEOUT_S")
    upstash_redis_rest_url: str | None = None
    upstash_redis_rest_token: SecretStr | None = None
    redis_url: SecretStr | None = None

    cron_secret: SecretStr | None = None
    ermis_queue_signing_secret: SecretStr | None = None
    ermis_queue_signing_secret_next: SecretStr | None = None
    ermis_queue_legacy_signatures_until: str | None = None
    vercel: str | None = None
    vercel_oidc_token: SecretStr | None = None
    vercel_queue_api_token: SecretStr | None = None
    vercel_queue_token: SecretStr | None = None
    vercel_queue_base_url: str | None = None
    vercel_region: str | None = None
    vercel_deployment_id: str | None = None
    ermis_queue_transport: Literal["vercel", "sqs"] = "vercel"

    ermis_tenant_ingestion_time_budget_ms: int = 240_000
    ermis_feed_timeout_s: float = Field(default=10.0, gt=0)
    ermis_feed_max_bytes: int = Field(default=5 * 1024 * 1024, gt=0)
    ermis_feed_build_throttle_s: float = Field(default=120.0, ge=0)
    ermis_webhook_timeout_s: float = Field(default=5.0, gt=0)
    ermis_synthesis_provider: str = "deterministic"
    ermis_synthesis_url: str | None = None
    ermis_synthesis_api_key: SecretStr | None = None
    ermis_synthesis_model: str = "gpt-4o-mini"
    ermis_metering_batch_size: int = Field(default=100, ge=1)
    polar_access_token: SecretStr | None = None
    polar_server_url: str | None = None
    sentry_dsn: SecretStr | None = None

    clerk_jwt_key: SecretStr | None = None
    clerk_authorized_parties: str | None = None
    ermis_allowed_origins: str | None = None
    ermis_trust_forwarded_headers: bool = False

    ermis_sse_poll_interval_ms: int | None = None
    ermis_sse_max_duration_s: float | None = None
    ermis_sse_safety_poll_s: float = Field(default=60.0, gt=0)
    ermis_streams_per_user: int = Field(default=12, ge=1)
    ermis_streams_per_tenant: int = Field(default=500, ge=1)
    ermis_stream_lease_s: float = Field(default=60.0, gt=0)
    ermis_header_timeout_s: float = Field(default=10.0, gt=0)
    ermis_body_timeout_s: float = Field(default=30.0, gt=0)

    @property
    def on_vercel(self) -> bool:
        return (self.vercel or "").strip() == "1"

    @staticmethod
    def sqs_queue_url_variable(wire_topic: str) -> str:
        """``rss-ingest`` → ``ERMIS_SQS_QUEUE_URL_RSS_INGEST``."""
        return "ERMIS_SQS_QUEUE_URL_" + wire_topic.upper().replace("-", "_")

    def sqs_queue_url(self, wire_topic: str) -> str | None:
        # One variable per topic, so read by name: the set of topics is not fixed here.
        return (os.environ.get(self.sqs_queue_url_variable(wire_topic)) or "").strip() or None

    @property
    def trusts_forwarded_headers(self) -> bool:
        """Whether ``X-Forwarded-Host``/``-Proto`` name the request's origin (``lib.http.same_origin``)."""
        return self.on_vercel or self.ermis_trust_forwarded_headers

    @property
    def allowed_origins(self) -> frozenset[str]:
        raw = self.ermis_allowed_origins or ""
        return frozenset(origin.strip().lower().rstrip("/") for origin in raw.split(",") if origin.strip())

    @property
    def authorized_parties(self) -> list[str]:
        raw = self.clerk_authorized_parties or ""
        return [party.strip() for party in raw.split(",") if party.strip()]

    def secret_values(self) -> list[str]:
        """Every configured secret, including a password embedded in a service URL."""
        values: list[str] = []
        for name, field_value in self:
            if isinstance(field_value, SecretStr):
                raw = field_value.get_secret_value()
                if raw:
                    values.append(raw)
                    password = _url_password(raw) if name.endswith("_url") else None
                    if password:
                        values.append(password)
        return values


def _url_password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def secret_or_none(value: SecretStr | None) -> str | None:
    """The secret's text, with an empty or whitespace-only value treated as unset."""
    if value is None:
        return None
    raw = value.get_secret_value()
    return raw if raw.strip() else None
