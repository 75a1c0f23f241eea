"""Development session keys: a local RSA key pair standing in for a Clerk instance.

``scripts/dev`` creates the pair in the data directory's ``dev-keys/`` once and serves with the public key
as ``CLERK_JWT_KEY`` (unless the environment already sets one); ``scripts/dev-token`` signs
session tokens with the private key for any claims (CONTRACTS §4), so every gate can be
exercised locally exactly as a Clerk session would.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from lib.auth.roles import ORG_ROLES, PLATFORM_ROLES
from lib.local.paths import dev_key_dir

PRIVATE_KEY_FILE = "clerk-dev-private.pem"
PUBLIC_KEY_FILE = "clerk-dev-public.pem"
DEV_KEY_ID = "ermis-dev"


def ensure_dev_key_pair(key_dir: Path) -> tuple[str, str]:
    """The (private, public) PEMs, generated on first use."""
    private_path, public_path = key_dir / PRIVATE_KEY_FILE, key_dir / PUBLIC_KEY_FILE
    if not private_path.exists() or not public_path.exists():
        key_dir.mkdir(parents=True, exist_ok=True)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        private_path.chmod(0o600)
        public_path.write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
    return private_path.read_text(), public_path.read_text()


def mint_session_token(private_pem: str, claims: dict[str, Any], ttl_seconds: int = 3600) -> str:
    now = int(time.time())
    payload = {"iat": now, "nbf": now, "exp": now + ttl_seconds, **claims}
    return jwt.encode(payload, private_pem, algorithm="RS256", headers={"kid": DEV_KEY_ID})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/dev-token", description="Mint a development Clerk session token.")
    parser.add_argument("--sub", default="user_dev", help="user id (default user_dev)")
    parser.add_argument("--org-id", help="tenant scope id (omit for no tenant)")
    parser.add_argument("--org-role", choices=sorted(ORG_ROLES))
    parser.add_argument("--platform-role", choices=sorted(PLATFORM_ROLES))
    parser.add_argument("--azp", help="authorized party (the browser origin)")
    parser.add_argument("--ttl", type=int, default=3600, help="seconds until expiry")
    parser.add_argument("--key-dir", type=Path, default=None, help="default: the dev data dir's dev-keys")
    args = parser.parse_args(argv)

    claims: dict[str, Any] = {"sub": args.sub}
    for claim, value in (
        ("org_id", args.org_id),
        ("org_role", args.org_role),
        ("platform_role", args.platform_role),
        ("azp", args.azp),
    ):
        if value:
            claims[claim] = value
    private_pem, _ = ensure_dev_key_pair(args.key_dir or dev_key_dir())
    sys.stdout.write(mint_session_token(private_pem, claims, args.ttl) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
