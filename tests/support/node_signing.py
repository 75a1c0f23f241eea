"""The TypeScript signing rule run by Node (``contracts/queue-signing.mjs``), as one long-lived
child answering a line per message — so a property test can ask it hundreds of times."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from lib.local.paths import PROJECT_ROOT

SIGNING_SCRIPT = PROJECT_ROOT / "contracts" / "queue-signing.mjs"


def node_vectors() -> str:
    """The vector file's text as the script writes it now."""
    return subprocess.run(
        ["node", str(SIGNING_SCRIPT), "vectors"], capture_output=True, text=True, check=True, timeout=60
    ).stdout


class NodeSigner:
    def __init__(self) -> None:
        self._child = subprocess.Popen(
            ["node", str(SIGNING_SCRIPT), "lines"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def sign(self, secret: str, message_text: str, signature: str | None = None) -> dict[str, Any]:
        """``{signingInput, signature, verified}`` for the message JSON text; ``verified`` says
        whether ``signature`` (when given) verifies under the TypeScript rule."""
        assert self._child.stdin is not None and self._child.stdout is not None
        request: dict[str, Any] = {"secret": secret, "message": message_text}
        if signature is not None:
            request["signature"] = signature
        self._child.stdin.write(json.dumps(request) + "\n")
        self._child.stdin.flush()
        line = self._child.stdout.readline()
        if not line:
            raise RuntimeError(f"the Node signer exited ({self._child.poll()})")
        return json.loads(line)

    def close(self) -> None:
        if self._child.stdin is not None:
            self._child.stdin.close()
        self._child.wait(timeout=30)
        if self._child.stdout is not None:
            self._child.stdout.close()
