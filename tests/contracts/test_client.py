"""What public/ermis-realtime.js takes from the event schemas: the generated validators and types
are current (contracts/generate-client.mjs run now writes the committed files byte for byte), the
declaration file declares exactly what the module exports, and a TypeScript front end's use of it
compiles under tsc --strict while each misuse it lists is an error."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from lib.local.paths import PROJECT_ROOT

NODE_MODULES = Path(os.environ.get("ERMIS_NODE_CONTRACTS", PROJECT_ROOT / ".data/toolchain/contracts/node_modules"))
PUBLIC = PROJECT_ROOT / "public"
GENERATED = ("ermis-realtime-events.js", "ermis-realtime-events.d.ts")


def test_the_committed_validators_and_types_are_what_the_schemas_generate(tmp_path: Path) -> None:
    subprocess.run(
        ["node", str(PROJECT_ROOT / "contracts" / "generate-client.mjs"), str(NODE_MODULES), str(tmp_path)],
        check=True,
        timeout=120,
    )
    for name in GENERATED:
        assert (tmp_path / name).read_text() == (PUBLIC / name).read_text(), (
            f"public/{name} is stale: scripts/contracts"
        )


def test_the_declarations_name_exactly_what_the_module_exports() -> None:
    exported = subprocess.run(
        [
            "node",
            "--input-type=module",
            "-e",
            "const m = await import(process.argv[1]); console.log(JSON.stringify(Object.keys(m)))",
            str(PUBLIC / "ermis-realtime.js"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    declared = re.findall(
        r"^export declare (?:const|function) (\w+)", (PUBLIC / "ermis-realtime.d.ts").read_text(), re.M
    )
    assert sorted(declared) == sorted(json.loads(exported))


def test_a_typescript_front_end_compiles_against_the_declarations_and_its_misuses_do_not() -> None:
    compiled = subprocess.run(
        [
            str(NODE_MODULES / ".bin" / "tsc"),
            "--strict",
            "--noEmit",
            "--target",
            "es2022",
            "--module",
            "nodenext",
            "--moduleResolution",
            "nodenext",
            str(PROJECT_ROOT / "tests" / "contracts" / "typescript" / "consumer.ts"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
