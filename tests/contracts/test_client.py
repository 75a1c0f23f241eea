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

from hypothesis import given, settings
from hypothesis import strategies as st

from lib.contracts.stream_events import STREAM_EVENTS
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


VALIDATE_IN_NODE = """
const { isValidEvent } = await import(process.argv[1]);
const frames = JSON.parse(require('fs').readFileSync(0, 'utf8'));
console.log(JSON.stringify(frames.map(([name, data]) => isValidEvent(name, data))));
"""


def node_verdicts(frames: list[tuple[str, object]]) -> list[bool]:
    result = subprocess.run(
        [
            "node",
            "--input-type=module",
            "-e",
            VALIDATE_IN_NODE.replace("require('fs')", "(await import('fs'))"),
            str(PUBLIC / "ermis-realtime-events.js"),
        ],
        input=json.dumps(frames),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(result.stdout)


def python_verdict(name: str, data: object) -> bool:
    try:
        STREAM_EVENTS[name].model_validate_json(json.dumps(data), strict=True)
    except ValueError:
        return False
    return True


event_frames = st.lists(
    st.sampled_from(sorted(STREAM_EVENTS)).flatmap(
        lambda name: st.tuples(
            st.just(name), st.from_type(STREAM_EVENTS[name]).map(lambda m: m.model_dump(mode="json"))
        )
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=15, deadline=None)
@given(event_frames, st.randoms(use_true_random=False))
def test_the_browser_validators_and_the_server_models_agree(frames: list, random) -> None:
    """Every payload the server's models make passes the browser's validator; the same payload
    with a field added, removed or of another type fails both."""
    cases: list[tuple[str, object]] = list(frames)
    for name, data in frames:
        cases.append((name, {**data, "unexpected": 1}))
        if data:
            key = random.choice(sorted(data))
            cases.append((name, {k: v for k, v in data.items() if k != key}))
            cases.append((name, {**data, key: [data[key]]}))
    verdicts = node_verdicts(cases)
    assert all(verdicts[: len(frames)])
    assert verdicts == [python_verdict(name, data) for name, data in cases]
