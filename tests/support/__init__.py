"""Test support: real servers on loopback, session tokens, function app loading."""
