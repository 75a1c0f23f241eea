"""Loading an ``api/`` function the way Vercel's bootstrap does: the file imported by path (its
name has brackets and hyphens, so not importable by name) under the module name the builder
gives it (``api/stories/[storyId]/events.py`` → ``api.stories.[storyId].events``, as
``vercel build`` writes ``__VC_HANDLER_MODULE_NAME``; compared in the deployment stage), and its
top-level ``app``. The dev server and the AWS entry point load functions through this.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from starlette.types import ASGIApp


def function_module_name(relative_file: str) -> str:
    return relative_file.removesuffix(".py").replace("/", ".")


def load_function_module(project_root: Path, relative_file: str) -> ModuleType:
    module_name = function_module_name(relative_file)
    spec = importlib.util.spec_from_file_location(module_name, project_root / relative_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {relative_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_function_app(project_root: Path, relative_file: str) -> ASGIApp:
    app = getattr(load_function_module(project_root, relative_file), "app", None)
    if app is None:
        raise ImportError(f"{relative_file} defines no top-level `app`")
    return app
