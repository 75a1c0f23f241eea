"""Every environment variable of the bundle, read in one place (CONTRACTS §3).

``get_settings()`` parses the environment once per process, which is what a warm serverless
instance wants; tests that change the environment call ``get_settings.cache_clear()``.

Each attribute of ``Settings`` declares its variable: the attribute's name upper-cased unless
``env=`` names another, read case-insensitively, an empty value counting as unset. A value that
does not parse, or is out of its bounds, raises ``SettingsError`` naming the variable and what
it must be, never the value (it may be a secret). Secrets are ``Secret`` so they never print by
accident, and ``secret_values()`` lists them for the log redactor in ``lib.observability``.

This is a plain reader, not pydantic-settings, because every request reads settings and a cold
start should not pay for pydantic unless the request validates a model (issue 23; the reader
replaced ``pydantic_settings.BaseSettings`` with the same names, defaults and bounds).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


class SettingsError(ValueError):
    """An environment variable that is set but not usable; the message names it, not its value."""


class Secret:
    """A secret's text: ``get_secret_value()`` reads it, ``repr`` and ``str`` never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__


class _Setting:
    """One environment variable: how it parses, its default and the bounds it must meet."""

    def __init__(
        self,
        parse: Callable[[str], Any],
        default: Any,
        expected: str,
        env: str | None = None,
        check: Callable[[Any], bool] | None = None,
    ) -> None:
        self.parse, self.default, self.expected, self.env, self.check = parse, default, expected, env, check

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.env = (self.env or name).upper()

    def read(self, environ: Mapping[str, str]) -> Any:
        raw = environ.get(self.env.lower(), "")
        if raw == "":
            return self.default
        try:
            value = self.parse(raw.strip() if self.parse is not Secret else raw)
        except ValueError:
            raise SettingsError(f"{self.env} must be {self.expected}") from None
        if self.check is not None and not self.check(value):
            raise SettingsError(f"{self.env} must be {self.expected}")
        return value


def _flag(raw: str) -> bool:
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError(raw)


def _text(default: str | None = None) -> Any:
    return _Setting(str, default, "text")


def _secret() -> Any:
    return _Setting(Secret, None, "text")


def _integer(default: int | None, *, minimum: int | None = None, env: str | None = None) -> Any:
    bound = f" of at least {minimum}" if minimum is not None else ""
    return _Setting(int, default, f"an integer{bound}", env, None if minimum is None else lambda v: v >= minimum)


def _number(
    default: float | None, *, above: float | None = None, minimum: float | None = None, env: str | None = None
) -> Any:
    if above is not None:
        return _Setting(float, default, f"a number above {above:g}", env, lambda v: v > above)
    if minimum is not None:
        return _Setting(float, default, f"a number of at least {minimum:g}", env, lambda v: v >= minimum)
    return _Setting(float, default, "a number", env)


def _one_of(*choices: str) -> Any:
    """One of ``choices``; unset, the first."""
    return _Setting(str, choices[0], "one of " + ", ".join(choices), check=lambda v: v in choices)


def _delays(raw: str) -> tuple[float, ...]:
    delays = tuple(float(part) for part in raw.split(","))
    if not all(0 < delay <= 7 * 86_400 for delay in delays):
        raise ValueError(raw)
    return delays


MAX_STREAM_DURATION_S = 290.0  # the longest self-close the spec sets (the story stream's)

# Like Stripe's: about three days, the gaps growing from a minute to twelve hours (11 retries).
DEFAULT_WEBHOOK_RETRY_SCHEDULE_S = (60.0, 300.0, 1800.0, 3600.0, 10_800.0, 21_600.0) + (43_200.0,) * 5


def _boolean(default: bool) -> Any:
    return _Setting(_flag, default, "a boolean (true/false, 1/0, yes/no, on/off)")


class Settings:
    database_url: Secret | None = _secret()
    ermis_database_listen_url: Secret | None = _secret()
    db_pool_max_size: int = _integer(4, minimum=1, env="ERMIS_DB_POOL_MAX_SIZE")
    db_connect_timeout_s: float = _number(5.0, above=0, env="ERMIS_DB_CONNECT_TIMEOUT_S")
    upstash_redis_rest_url: str | None = _text()
    upstash_redis_rest_token: Secret | None = _secret()
    redis_url: Secret | None = _secret()

    cron_secret: Secret | None = _secret()
    ermis_queue_signing_secret: Secret | None = _secret()
    ermis_queue_signing_secret_next: Secret | None = _secret()
    ermis_queue_legacy_signatures_until: str | None = _text()
    vercel: str | None = _text()
    vercel_env: str | None = _text()  # Vercel's: production, preview or development
    ermis_env: str | None = _text()  # the same, where Vercel does not set it (the AWS template: production)
    vercel_oidc_token: Secret | None = _secret()
    vercel_queue_api_token: Secret | None = _secret()
    vercel_queue_token: Secret | None = _secret()
    vercel_queue_base_url: str | None = _text()
    vercel_region: str | None = _text()
    vercel_deployment_id: str | None = _text()
    ermis_queue_transport: str = _one_of("vercel", "sqs")

    ermis_tenant_ingestion_time_budget_ms: int = _integer(240_000)
    ermis_feed_timeout_s: float = _number(10.0, above=0)
    ermis_feed_max_bytes: int = _integer(5 * 1024 * 1024, minimum=1)
    ermis_feed_build_throttle_s: float = _number(120.0, minimum=0)
    ermis_webhook_timeout_s: float = _number(5.0, above=0)
    ermis_egress_allow: str | None = _text()
    ermis_webhook_circuit_open_s: float = _number(60.0, above=0)
    ermis_webhook_retry_schedule_s: tuple[float, ...] = _Setting(
        _delays, DEFAULT_WEBHOOK_RETRY_SCHEDULE_S, "comma-separated delays in seconds, each above 0 and at most 7 days"
    )
    ermis_synthesis_provider: str = _text("deterministic")
    ermis_synthesis_url: str | None = _text()
    ermis_synthesis_api_key: Secret | None = _secret()
    ermis_synthesis_model: str = _text("gpt-4o-mini")
    ermis_metering_batch_size: int = _integer(100, minimum=1)
    polar_access_token: Secret | None = _secret()
    polar_server_url: str | None = _text()
    sentry_dsn: Secret | None = _secret()
    ermis_pseudonym_key: Secret | None = _secret()  # keys how logs name a person (lib.observability)

    clerk_jwt_key: Secret | None = _secret()
    clerk_authorized_parties: str | None = _text()
    ermis_allowed_origins: str | None = _text()
    ermis_trust_forwarded_headers: bool = _boolean(False)

    ermis_sse_poll_interval_ms: int | None = _integer(None)
    # Below the stream functions' maxDuration (vercel.json: 300 s), so a stream always ends
    # itself, with its end frame, before the platform cuts it.
    ermis_sse_max_duration_s: float | None = _Setting(
        float,
        None,
        f"a number above 0 and at most {MAX_STREAM_DURATION_S:g} (the stream functions' maxDuration is 300 s)",
        check=lambda v: 0 < v <= MAX_STREAM_DURATION_S,
    )
    ermis_sse_safety_poll_s: float = _number(60.0, above=0)
    ermis_streams_per_user: int = _integer(12, minimum=1)
    ermis_streams_per_tenant: int = _integer(500, minimum=1)
    ermis_stream_lease_s: float = _number(60.0, above=0)
    ermis_stream_detect_interval_ms: int = _integer(5, minimum=1)
    ermis_stream_detector_lease_s: float = _number(3.0, above=0)
    ermis_header_timeout_s: float = _number(10.0, above=0)
    ermis_body_timeout_s: float = _number(30.0, above=0)

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        source = os.environ if environ is None else environ
        lowered = {name.lower(): value for name, value in source.items()}
        for name, setting in _declared_settings():
            # The instance attribute shadows the class's declaration (a non-data descriptor).
            self.__dict__[name] = setting.read(lowered)

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for name, _ in _declared_settings():
            yield name, self.__dict__[name]

    @property
    def on_vercel(self) -> bool:
        return (self.vercel or "").strip() == "1"

    @property
    def in_production(self) -> bool:
        return (self.vercel_env or self.ermis_env or "").strip().lower() == "production"

    def production_refusal(self) -> str | None:
        """Why this process must not serve production, or ``None``: it is not production, or it
        has every variable production needs (``PRODUCTION_REQUIRED``)."""
        if not self.in_production:
            return None
        for variable, why in PRODUCTION_REQUIRED.items():
            value = getattr(self, variable.lower())
            if not (secret_or_none(value) if isinstance(value, Secret) else (value or "").strip()):
                return f"{variable} must be set in production ({why})"
        return None

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
            if isinstance(field_value, Secret):
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


def _declared_settings() -> Iterator[tuple[str, _Setting]]:
    return ((name, value) for name, value in vars(Settings).items() if isinstance(value, _Setting))


# What a production process refuses to start without, and why (README: what to set on Vercel).
PRODUCTION_REQUIRED = {
    "CLERK_AUTHORIZED_PARTIES": "without it a session token minted for another site is accepted",
    "ERMIS_PSEUDONYM_KEY": "without it logs name a person as person:unkeyed, or by a guessable digest",
}


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def secret_or_none(value: Secret | None) -> str | None:
    """The secret's text, with an empty or whitespace-only value treated as unset."""
    if value is None:
        return None
    raw = value.get_secret_value()
    return raw if raw.strip() else None
