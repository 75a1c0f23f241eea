"""The domain: aggregation, tenant ingestion, alerts and their webhook deliveries, flags, AI usage
accounting, erasure, and the stuck work operators act on. Knows no HTTP routes; talks to storage
through ``lib.db`` and ``lib.redis``, to tenants' URLs through ``lib.egress``, and schedules work
on the queue through ``lib.queues.publish``."""
