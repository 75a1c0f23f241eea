"""``scripts/contracts``: after a contract changed in ``lib/contracts``, rewrite what is derived
from it — the committed JSON Schemas under ``contracts/schemas`` (``lib.contracts.schemas``), then
the browser client's validators and event types (``contracts/generate-client.mjs``, with the Node
tools ``scripts/_ensure_node_tools.sh`` installs)."""

from __future__ import annotations

import os
import subprocess

from lib.contracts.schemas import write_schemas
from lib.local.paths import PROJECT_ROOT
from lib.ops.cli import ScriptError, run_script

SCHEMAS_DIRECTORY = PROJECT_ROOT / "contracts" / "schemas"
CLIENT_GENERATOR = PROJECT_ROOT / "contracts" / "generate-client.mjs"


def write_contracts() -> int:
    written = write_schemas(SCHEMAS_DIRECTORY)
    print(f"{len(written)} schemas written to {SCHEMAS_DIRECTORY.relative_to(PROJECT_ROOT)}")
    node_modules = os.environ.get("ERMIS_NODE_CONTRACTS")
    if not node_modules:
        raise ScriptError("ERMIS_NODE_CONTRACTS is not set: run this through scripts/contracts")
    generated = subprocess.run(["node", str(CLIENT_GENERATOR), node_modules], capture_output=True, text=True)
    if generated.returncode != 0:
        raise ScriptError(f"contracts/generate-client.mjs failed: {generated.stderr.strip()}")
    print("public/ermis-realtime-events.js and .d.ts regenerated")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(write_contracts))
