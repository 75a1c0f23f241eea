"""The stream log (migrations 0012, 0013, 0016) and what the notification stream and ``GET
/api/notifications`` read through it: a user's notifications and a tenant's alert history, review
status events and failed deliveries, by their positions. The feed reads only a channel's head
(``CHANNEL_HEAD``, ``lib.platform.editorial``).

Every row of those kinds is logged in ``stream_changes`` under its *channel* — the audience
that may see it: ``alerts|<tenant>``, ``deliveries|<tenant>``, ``review|<tenant>`` and
``review|*`` (the platform review), ``user|<user id>``, and every draft write under
``drafts|<tenant>`` — and gets a *position* after its transaction commits
(``lib.streams.positioner``, migration 0016), in the order the rows become visible within the
channel; a row not yet positioned is not read here. Reads here go through the log and join the row itself: a row
deleted since it was logged (an erasure purge) keeps its position and has no row (``None``):
the reader skips it without an error.

- ``latest_in_channel``: the newest ``limit`` rows (the replay, the REST snapshot) and the
  channel's *head* — the highest position visible now, or the retention horizon if that is
  higher — in one statement, so the head is exactly "everything up to here was read".
- ``after_in_channel``: the rows after a position, in position order, one page of ``limit``
  (``after_in_channels``: several channels of a kind at once).
- Both report the channel's retention horizon (``pruned_through``): positions up to it were
  deleted by the state cleanup (``prune_stream_changes_batch``, after ``RETENTION_DAYS``), so a
  cursor below it may have missed rows — the stream says so instead of skipping them.

Tenants are compared normalised — ``lib.auth.tenants.normalize_tenant_id``: trim, then lower
case — on both sides, as the migration's triggers write the channels; a blank tenant never matches (the read is
not even made). ``ALL_TENANTS`` names the platform review (every tenant's events).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from lib.auth.tenants import normalize_tenant_id
from lib.db.pool import connection
from lib.lazy_imports import lazy_import
from lib.settings import get_settings, secret_or_none

if TYPE_CHECKING:
    from psycopg import AsyncConnection

psycopg_rows = lazy_import("psycopg.rows")

ALL_TENANTS: Final = "*"
RETENTION_DAYS: Final = 7
CHANNEL_VALUE_MAX = 200  # the triggers cut a channel's tenant or user id here, and so do readers


@dataclass(frozen=True)
class Source:
    """One streamed kind: its table, the columns a payload is made of (``at`` is its time) and
    what else a logged row must still satisfy to be sent."""

    table: str
    columns: str
    still: str = "TRUE"


ALERTS = Source("alert_history", "t.id, t.rule_id, t.story_id, t.title, t.severity, t.channel, t.delivered_at AS at")
REVIEWS = Source(
    "review_status_events", "t.id, t.story_id, t.headline, t.action, t.tenant_scope_id, t.changed_at AS at"
)
# A failed delivery retried to success since is no longer a failure to show.
DELIVERIES = Source(
    "delivery_logs",
    "t.id, t.delivery_id, t.tenant_scope_id, t.method, t.response_code, t.endpoint, t.created_at AS at",
    "t.status = 'failed'",
)
NOTIFICATIONS = Source("notifications", "t.id, t.title, t.body, t.type, t.read, t.created_at AS at")


def tenant_channel(prefix: str, tenant_scope_id: str | None) -> str | None:
    """The channel of a tenant's rows of one kind, or ``None`` without a tenant."""
    tenant = normalize_tenant_id(tenant_scope_id)
    return f"{prefix}|{tenant[:CHANNEL_VALUE_MAX]}" if tenant else None


def review_channel(review_scope: str | None) -> str | None:
    if review_scope == ALL_TENANTS:
        return "review|*"
    return tenant_channel("review", review_scope)


def user_channel(user_id: str) -> str:
    return f"user|{user_id[:CHANNEL_VALUE_MAX]}"


@dataclass(frozen=True)
class ChannelRead:
    """What one read of a channel found: ``(position, row or None)`` pairs (``None``: the row is
    gone), ``head`` (``latest_in_channel``: the highest position read up to; ``after_in_channel``:
    the last position of the page, or the one it started after) and the retention horizon."""

    rows: list[tuple[int, dict[str, Any] | None]]
    head: int
    pruned_through: int
    full: bool  # the page was full: there may be more after ``head``


async def _channel_rows(
    sql: str, params: tuple[Any, ...] | dict[str, Any], conn: AsyncConnection[Any] | None = None
) -> list[dict[str, Any]]:
    """The rows of ``sql`` as dicts, on ``conn`` or a pooled connection."""
    if conn is not None:
        async with conn.cursor(row_factory=psycopg_rows.dict_row) as cursor:
            await cursor.execute(sql, params)
            return await cursor.fetchall()
    async with connection() as pooled:
        cursor = await pooled.execute(sql, params)
        return await cursor.fetchall()


def _split(rows: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any] | None]]:
    """(position, the row's own columns or ``None`` when it is gone) for each logged row read."""
    return [
        (row.pop("log_position"), row if row.pop("present") else None)
        for row in rows
        if row["log_position"] is not None
    ]


_HORIZON = "COALESCE((SELECT pruned_through FROM stream_channels WHERE channel = %(channel)s), 0)"
# The head of channel %(channel)s, as an expression: the highest position visible to the statement
# that evaluates it, or the retention horizon if that is higher. Evaluated in the same statement
# as a read of the rows, it is exactly "every change up to here is in what was read".
CHANNEL_HEAD = f"""GREATEST(
    COALESCE((SELECT max(position) FROM stream_changes WHERE channel = %(channel)s AND position IS NOT NULL), 0),
    {_HORIZON})"""


async def latest_in_channel(source: Source, channel: str, limit: int) -> ChannelRead:
    rows = await _channel_rows(
        f"""
        SELECT h.head, h.pruned_through, c.position AS log_position, t.id IS NOT NULL AS present, {source.columns}
        FROM (SELECT {CHANNEL_HEAD} AS head, {_HORIZON} AS pruned_through) h
        LEFT JOIN LATERAL (SELECT position, row_id FROM stream_changes
                           WHERE channel = %(channel)s AND position IS NOT NULL
                           ORDER BY position DESC LIMIT %(limit)s) c ON TRUE
        LEFT JOIN {source.table} t ON t.id = c.row_id AND {source.still}
        ORDER BY c.position DESC
        """,
        {"channel": channel, "limit": limit},
    )
    head, pruned_through = rows[0]["head"], rows[0]["pruned_through"]
    for row in rows:
        del row["head"], row["pruned_through"]
    return ChannelRead(_split(rows), head, pruned_through, full=False)


async def after_in_channel(source: Source, channel: str, after: int, limit: int) -> ChannelRead:
    return (await after_in_channels(source, {channel: after}, limit))[channel]


async def after_in_channels(
    source: Source, afters: dict[str, int], limit: int, conn: AsyncConnection[Any] | None = None
) -> dict[str, ChannelRead]:
    """``after_in_channel`` for several channels of one kind in one statement — the change
    detector reads the channels it tells of at once, on its own connection (``conn``)."""
    channels = list(afters)
    rows = await _channel_rows(
        f"""
        SELECT w.channel AS log_channel, COALESCE(k.pruned_through, 0) AS pruned_through,
               c.position AS log_position, t.id IS NOT NULL AS present, {source.columns}
        FROM unnest(%(channels)s::text[], %(afters)s::bigint[]) AS w(channel, after)
        LEFT JOIN stream_channels k ON k.channel = w.channel
        LEFT JOIN LATERAL (SELECT position, row_id FROM stream_changes
                           WHERE channel = w.channel AND position > w.after
                           ORDER BY position LIMIT %(limit)s) c ON TRUE
        LEFT JOIN {source.table} t ON t.id = c.row_id AND {source.still}
        ORDER BY w.channel, c.position
        """,
        {"channels": channels, "afters": [afters[channel] for channel in channels], "limit": limit},
        conn,
    )
    by_channel: dict[str, list[dict[str, Any]]] = {channel: [] for channel in channels}
    horizons: dict[str, int] = {}
    for row in rows:
        channel = row.pop("log_channel")
        horizons[channel] = row.pop("pruned_through")
        by_channel[channel].append(row)
    reads = {}
    for channel, channel_rows in by_channel.items():
        positioned = _split(channel_rows)
        head = positioned[-1][0] if positioned else afters[channel]
        reads[channel] = ChannelRead(positioned, head, horizons[channel], full=len(positioned) >= limit)
    return reads


async def unread_notification_count(user_id: str) -> int:
    rows = await _channel_rows(
        "SELECT count(*)::int AS unread FROM notifications WHERE user_id = %s AND NOT read", (user_id,)
    )
    return rows[0]["unread"]


_epochs: dict[str | None, str] = {}


async def stream_log_epoch() -> str:
    """Which database positions belong to (read once per process and database)."""
    url = secret_or_none(get_settings().database_url)
    epoch = _epochs.get(url)
    if epoch is None:
        rows = await _channel_rows("SELECT epoch FROM stream_log_epoch", ())
        epoch = _epochs[url] = rows[0]["epoch"]
    return epoch


async def prune_stream_changes_batch(batch_size: int) -> int:
    """Delete up to ``batch_size`` positions logged more than ``RETENTION_DAYS`` ago, raising each
    channel's retention horizon to the highest one deleted, in one statement (one transaction)."""
    rows = await _channel_rows(
        """
        WITH doomed AS (
            SELECT id FROM stream_changes
            WHERE logged_at < now() - make_interval(days => %s) AND position IS NOT NULL
            ORDER BY id LIMIT %s
        ), deleted AS (
            DELETE FROM stream_changes c USING doomed WHERE c.id = doomed.id RETURNING c.channel, c.position
        ), horizon AS (
            INSERT INTO stream_channels (channel, pruned_through)
            SELECT channel, max(position) FROM deleted GROUP BY channel
            ON CONFLICT (channel) DO UPDATE
            SET pruned_through = GREATEST(stream_channels.pruned_through, EXCLUDED.pruned_through)
        )
        SELECT count(*)::int AS deleted FROM deleted
        """,
        (RETENTION_DAYS, batch_size),
    )
    return rows[0]["deleted"]
