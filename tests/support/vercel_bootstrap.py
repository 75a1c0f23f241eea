"""A built function started the way Vercel's platform starts it.

The platform unpacks a function's files (its ``.vc-config.json`` ``filePathMap``: our sources
plus the vendored ``_vendor/`` packages and Vercel's runtime) into a task directory, listens on
a Unix socket, and runs ``python3.12 -c "import vc__handler__python"`` there with
``VERCEL_IPC_PATH`` pointing at the socket. The bootstrap (``vercel_runtime.vc_init``, as the
build vendored it) imports the function, serves its ``app`` on a loopback port and announces
``server-started`` with that port over the socket; from then on it sends log lines there too
(stdout and stderr are redirected), so the socket is read for the function's whole life.

Here the task directory is made of hard links into the build, the interpreter is a bare 3.12
virtual environment (standard library only, nothing from this project's ``.venv``), and the
environment is emptied (``env -i``) save the function's ``environment``, the variables given
and ``VERCEL_IPC_PATH``. A function that cannot import raises ``FunctionBootError`` carrying the
bootstrap's own ``unrecoverable-error`` message.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tests.support.vercel_build import BuiltFunction, python312

BOOT_TIMEOUT_S = 60


class FunctionBootError(RuntimeError):
    pass


def bare_python312(directory: Path) -> Path:
    """A 3.12 interpreter with nothing but the standard library (made once under ``directory``)."""
    python = directory / "bin" / "python3.12"
    if not python.exists():
        subprocess.run([str(python312()), "-m", "venv", "--without-pip", str(directory)], check=True, timeout=120)
    return python


def materialise(function: BuiltFunction, task_dir: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """The function's files as the platform unpacks them: the ``.func`` directory's own files plus
    every ``filePathMap`` entry (``leave_out``: path prefixes to omit, to prove a boot can fail)."""
    shutil.copytree(function.directory, task_dir)
    for target, source in function.file_path_map.items():
        if target.startswith(leave_out):
            continue
        destination = task_dir / target
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(function.project / source, destination)
        except OSError:
            shutil.copy2(function.project / source, destination)
    return task_dir


@dataclass
class _IpcChannel:
    """The platform's end of ``VERCEL_IPC_PATH``: NUL-separated JSON messages."""

    path: str
    messages: list[dict] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.listener.settimeout(BOOT_TIMEOUT_S)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            connection, _ = self.listener.accept()
        except OSError:
            self.started.set()
            return
        buffer = b""
        with connection:
            while chunk := connection.recv(65536):
                buffer += chunk
                *complete, buffer = buffer.split(b"\0")
                for raw in complete:
                    message = json.loads(raw)
                    self.messages.append(message)
                    if message.get("type") in ("server-started", "unrecoverable-error"):
                        self.started.set()
        self.started.set()

    def first(self, kind: str) -> dict | None:
        return next((message for message in self.messages if message.get("type") == kind), None)

    def close(self) -> None:
        self.listener.close()


class RunningFunction:
    """``with RunningFunction(built, task_dir, python, env) as fn: httpx.get(fn.url + path)``."""

    def __init__(
        self,
        function: BuiltFunction,
        task_dir: Path,
        python: Path,
        env: dict[str, str],
        leave_out: tuple[str, ...] = (),
    ) -> None:
        self.function, self.task_dir, self.python, self.env, self.leave_out = function, task_dir, python, env, leave_out
        self.socket_dir = Path(tempfile.mkdtemp(prefix="vc-ipc-"))
        self.url = ""
        self.boot_seconds = 0.0

    def __enter__(self) -> RunningFunction:
        materialise(self.function, self.task_dir, self.leave_out)
        self.ipc = _IpcChannel(str(self.socket_dir / "ipc.sock"))
        environment = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            **self.function.config.get("environment", {}),
            **self.env,
            "VERCEL_IPC_PATH": self.ipc.path,
        }
        self.raw_output = self.task_dir.with_name(self.task_dir.name + ".log")
        started_at = time.perf_counter()
        with self.raw_output.open("wb") as raw_output:
            self.process = subprocess.Popen(
                [str(self.python), "-c", "import vc__handler__python"],
                cwd=self.task_dir,
                env=environment,
                stdout=raw_output,
                stderr=subprocess.STDOUT,
            )
        self.ipc.started.wait(BOOT_TIMEOUT_S)
        self.boot_seconds = time.perf_counter() - started_at
        started = self.ipc.first("server-started")
        if started is None:
            self.__exit__(None, None, None)
            failure = self.ipc.first("unrecoverable-error")
            reason = failure["payload"]["message"] if failure else "no server-started within the boot timeout"
            raise FunctionBootError(f"{self.function.name} did not boot: {reason}\n{self.output()}")
        self.url = f"http://127.0.0.1:{started['payload']['httpPort']}"
        self.server_started = started["payload"]  # the bootstrap's own initDuration, userInitDuration
        return self

    def logs(self) -> str:
        """Everything the function wrote to stdout/stderr (relayed over IPC once it started)."""
        lines = [
            base64.b64decode(message["payload"]["message"]).decode(errors="replace")
            for message in list(self.ipc.messages)
            if message.get("type") == "log"
        ]
        return "".join(lines)

    def output(self) -> str:
        """The relayed logs, then what went to the real stdout/stderr (before the relay, or fatal)."""
        return self.logs() + self.raw_output.read_text(errors="replace")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.ipc.close()
        shutil.rmtree(self.socket_dir, ignore_errors=True)
