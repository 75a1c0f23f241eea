"""The environment reader (lib.settings): names, defaults, bounds, secrets."""

from __future__ import annotations

import pytest

from lib.settings import Secret, Settings, SettingsError, secret_or_none


def test_unset_and_empty_variables_take_their_defaults() -> None:
    settings = Settings({"ERMIS_DB_POOL_MAX_SIZE": "", "CRON_SECRET": ""})
    assert settings.db_pool_max_size == 4 and settings.cron_secret is None
    assert settings.ermis_queue_transport == "vercel" and settings.ermis_trust_forwarded_headers is False
    assert settings.ermis_sse_poll_interval_ms is None and settings.ermis_stream_lease_s == 60.0


def test_values_parse_by_their_declared_type_whatever_the_case_of_the_name() -> None:
    settings = Settings(
        {
            "ermis_db_pool_max_size": " 7 ",
            "ERMIS_SSE_SAFETY_POLL_S": "2.5",
            "Ermis_Trust_Forwarded_Headers": "yes",
            "ERMIS_QUEUE_TRANSPORT": "sqs",
            "VERCEL": "1",
        }
    )
    assert settings.db_pool_max_size == 7 and settings.ermis_sse_safety_poll_s == 2.5
    assert settings.ermis_trust_forwarded_headers is True and settings.ermis_queue_transport == "sqs"
    assert settings.on_vercel


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("ERMIS_DB_POOL_MAX_SIZE", "0", "an integer of at least 1"),
        ("ERMIS_DB_POOL_MAX_SIZE", "four", "an integer of at least 1"),
        ("ERMIS_DB_CONNECT_TIMEOUT_S", "0", "a number above 0"),
        ("ERMIS_FEED_BUILD_THROTTLE_S", "-1", "a number of at least 0"),
        ("ERMIS_QUEUE_TRANSPORT", "kafka", "one of vercel, sqs"),
        ("ERMIS_TRUST_FORWARDED_HEADERS", "maybe", "a boolean"),
    ],
)
def test_a_bad_value_names_the_variable_and_what_it_must_be_never_the_value(
    variable: str, value: str, expected: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings({variable: value})
    assert variable in str(raised.value) and expected in str(raised.value)
    assert value not in str(raised.value).replace(expected, "")


def test_secrets_never_print_and_are_listed_for_the_redactor() -> None:
    settings = Settings(
        {"CRON_SECRET": "cron-secret-value", "DATABASE_URL": "postgresql://app:db-password@db.example/ermis"}
    )
    assert isinstance(settings.cron_secret, Secret)
    assert "cron-secret-value" not in repr(settings.cron_secret) + str(settings.cron_secret)
    assert secret_or_none(settings.cron_secret) == "cron-secret-value"
    assert {"cron-secret-value", "db-password"} <= set(settings.secret_values())
    assert secret_or_none(Secret("   ")) is None and secret_or_none(None) is None


@pytest.mark.parametrize("marker", [{"VERCEL_ENV": "production"}, {"ERMIS_ENV": "production"}])
def test_production_needs_the_authorized_parties_and_the_pseudonym_key(marker: dict[str, str]) -> None:
    complete = {**marker, "CLERK_AUTHORIZED_PARTIES": "https://news.example", "ERMIS_PSEUDONYM_KEY": "k" * 32}
    assert Settings(complete).production_refusal() is None
    for variable in ("CLERK_AUTHORIZED_PARTIES", "ERMIS_PSEUDONYM_KEY"):
        for missing in ("", "   "):
            refusal = Settings({**complete, variable: missing}).production_refusal()
            assert refusal is not None and refusal.startswith(f"{variable} must be set in production")
    assert Settings({"VERCEL_ENV": "preview"}).production_refusal() is None  # previews and development may go without
    assert Settings({}).production_refusal() is None
