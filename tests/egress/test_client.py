"""lib.egress.client against real servers on loopback: the URL's Host and TLS server name travel
unchanged to the pinned address, allow-list entries open exactly what they name, environment
proxies are not used, and a failure is described without the address a name resolved to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lib.egress.client import GuardedSession, failure_detail, resolving_with, shared_ssl_context
from lib.egress.destinations import DestinationRefused
from lib.local.services import free_port
from tests.support.outbound import Counting, TestResolver
from tests.support.servers import serve_in_thread


async def get(url: str, **kwargs) -> int:
    async with GuardedSession(timeout_s=5) as session, session.open("GET", url, **kwargs) as response:
        return response.status_code


async def test_a_pinned_name_keeps_its_host_header(set_env) -> None:
    receiver = Counting()
    with serve_in_thread(receiver.app) as url:
        port = url.rsplit(":", 1)[1]
        set_env(ERMIS_EGRESS_ALLOW="receiver.internal")
        with resolving_with(TestResolver({"receiver.internal": [["127.0.0.1"]]})):
            assert await get(f"http://receiver.internal:{port}/feed") == 200
    assert receiver.requests[0]["host"] == f"receiver.internal:{port}"


async def test_an_allowed_host_port_opens_that_port_only(set_env) -> None:
    allowed, other = Counting(), Counting()
    with serve_in_thread(allowed.app) as allowed_url, serve_in_thread(other.app) as other_url:
        set_env(ERMIS_EGRESS_ALLOW=allowed_url.removeprefix("http://"))
        assert await get(f"{allowed_url}/x") == 200
        with pytest.raises(DestinationRefused, match="the host is a loopback address"):
            await get(f"{other_url}/x")
    assert (allowed.count, other.count) == (1, 0)


async def test_environment_proxies_are_not_used(set_env) -> None:
    """A proxy would make the connection for us, unchecked: the guard never hands one a request."""
    proxy, target = Counting(), Counting()
    with serve_in_thread(proxy.app) as proxy_url, serve_in_thread(target.app) as target_url:
        set_env(HTTP_PROXY=proxy_url, ALL_PROXY=proxy_url, ERMIS_EGRESS_ALLOW=target_url.removeprefix("http://"))
        assert await get(f"{target_url}/x") == 200
    assert (proxy.count, target.count) == (0, 1)


async def test_a_failure_names_no_resolved_address(set_env) -> None:
    closed = free_port()
    set_env(ERMIS_EGRESS_ALLOW=f"127.0.0.1:{closed}")
    with resolving_with(TestResolver({"gone.test": [["127.0.0.1"]]})):
        with pytest.raises(Exception) as raised:
            await get(f"http://gone.test:{closed}/")
    assert failure_detail(raised.value, 5) == "could not connect"


async def test_a_redirect_to_a_refused_hop_is_refused_before_it_is_sent(set_env) -> None:
    canary = Counting()
    with serve_in_thread(canary.app) as canary_url:
        mover = Counting(redirect_to=f"{canary_url}/inside")
        with serve_in_thread(mover.app, host="127.0.0.2") as mover_url:
            set_env(ERMIS_EGRESS_ALLOW="127.0.0.2")
            with pytest.raises(DestinationRefused):
                await get(f"{mover_url}/feed", follow_redirects=True)
            assert await get(f"{mover_url}/feed") == 302  # not following: the 3xx is the answer
    assert (mover.count, canary.count) == (2, 0)


def certificate_for(name: str, directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` (and its key), as files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


async def test_tls_is_verified_for_the_urls_name_although_the_connection_is_pinned(set_env, tmp_path: Path) -> None:
    """The connection goes to the checked address, and TLS still names the URL's host: the
    certificate, valid for ``receiver.internal`` only, verifies (connecting by the address
    would not), and the same server reached under another name is refused by TLS."""
    cert_file, key_file = certificate_for("receiver.internal", tmp_path)
    shared_ssl_context().load_verify_locations(cafile=str(cert_file))  # trust this test's certificate too
    receiver = Counting()
    with serve_in_thread(receiver.app, ssl_certfile=str(cert_file), ssl_keyfile=str(key_file)) as url:
        port = url.rsplit(":", 1)[1]
        set_env(ERMIS_EGRESS_ALLOW="receiver.internal,other.internal")
        names = {"receiver.internal": [["127.0.0.1"]], "other.internal": [["127.0.0.1"]]}
        with resolving_with(TestResolver(names)):
            assert await get(f"https://receiver.internal:{port}/hook") == 200
            with pytest.raises(httpx.ConnectError, match=r"CERTIFICATE_VERIFY_FAILED|Hostname mismatch"):
                await get(f"https://other.internal:{port}/hook")
    assert receiver.count == 1 and receiver.requests[0]["host"] == f"receiver.internal:{port}"
