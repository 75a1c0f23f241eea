"""Redis: one factory for the Upstash REST client or a plain Redis client."""
