"""``scripts/contracts``: rewrite the committed JSON Schemas (``lib.contracts.schemas``) under
``contracts/schemas`` from the models, after a contract changed."""

from __future__ import annotations

from lib.contracts.schemas import write_schemas
from lib.local.paths import PROJECT_ROOT
from lib.ops.cli import run_script

SCHEMAS_DIRECTORY = PROJECT_ROOT / "contracts" / "schemas"


def write_contracts() -> int:
    written = write_schemas(SCHEMAS_DIRECTORY)
    print(f"{len(written)} schemas written to {SCHEMAS_DIRECTORY.relative_to(PROJECT_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(write_contracts))
