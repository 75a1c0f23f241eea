"""Postgres: the connection pool, the migrations, and the KV state store."""
