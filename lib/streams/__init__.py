"""Server-sent-event streams: each is a server-side poller over Postgres (spec: realtime
streams). ``sse`` builds frames and responses, ``shared_reads`` coalesces reads across
connections, and one module per stream holds its contract."""
