"""The installed package: public names, docstrings and type stubs that match the module."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import prefixhit
from prefixhit import _core

PACKAGE = Path(prefixhit.__file__).resolve().parent


def stub_names() -> dict[str, set[str]]:
    """Top-level names of _core.pyi and the members of each stubbed class."""
    tree = ast.parse((PACKAGE / "_core.pyi").read_text(encoding="utf-8"))
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {
                n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
        elif isinstance(node, ast.FunctionDef):
            out[node.name] = set()
    return out


def test_public_names_exist() -> None:
    for name in prefixhit.__all__:
        assert hasattr(prefixhit, name), name


def test_typed_package_files() -> None:
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "_core.pyi").is_file()


def test_stub_covers_the_module() -> None:
    stubs = stub_names()
    for name, obj in vars(_core).items():
        if name.startswith("_"):
            continue
        assert name in stubs, f"_core.{name} is missing from _core.pyi"
        if inspect.isclass(obj):
            for member in vars(obj):
                if member.startswith("_") and member not in (
                    "__len__",
                    "__contains__",
                    "__getitem__",
                ):
                    continue
                assert member in stubs[name], f"_core.{name}.{member} is missing from _core.pyi"


def test_public_api_has_docstrings() -> None:
    for cls in (
        prefixhit.Coordinator,
        prefixhit.BlockIndex,
        prefixhit.KeySet,
        prefixhit.GroupSpec,
        prefixhit.BatchLookupResult,
        prefixhit.KeyPlan,
    ):
        assert cls.__doc__, cls
    for method in (
        "find_longest_cache_hit",
        "find_longest_cache_hits",
        "load_mask",
        "store_mask",
        "lookup_mask",
        "key_plan",
        "chunk_keys",
        "align_lookup_length",
    ):
        doc = getattr(prefixhit.Coordinator, method).__doc__
        assert doc and len(doc) > 40, method
    for cls in (
        prefixhit.PrefixhitError,
        prefixhit.InvalidConfigError,
        prefixhit.BackendUnavailableError,
    ):
        assert cls.__doc__
