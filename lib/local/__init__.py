"""The local runtime: what Vercel does for the bundle in production, done on a laptop.

File routing (``routing``), the dev server (``server``), the cron scheduler (``scheduler``),
embedded Postgres and Redis (``services``), an Upstash REST front for a local Redis
(``upstash_rest``) and development session keys (``dev_keys``). Used by ``scripts/`` and the
tests; never imported by a deployed function.
"""
