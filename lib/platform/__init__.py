"""The domain: AI usage accounting, erasure, and (with later issues) aggregation, alerts, flags.
Knows no HTTP; talks to storage through ``lib.db`` and ``lib.redis``."""
