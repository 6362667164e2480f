"""The component contract (design card, "Contracts: Component"), checked on every ComponentResource in components/:
the signature, the type token, frozen arguments whose required fields say why, register_outputs last, and in the
bundled plans every resource under a component and every Kubernetes object on an explicit provider."""

from __future__ import annotations

import ast
import importlib
import inspect
import typing
from collections.abc import Callable
from pathlib import Path

import pulumi
import pytest

from components.specs import Args
from helpers import ROOT
from inferstack_cli.plan import Plan


def _components() -> list[tuple[Path, ast.ClassDef, type]]:
    found = []
    for path in sorted((ROOT / "components").rglob("*.py")):
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                cls = getattr(module, node.name)
                if isinstance(cls, type) and issubclass(cls, pulumi.ComponentResource):
                    found.append((path, node, cls))
    return found


COMPONENTS = _components()
IDS = [cls.__name__ for _, _, cls in COMPONENTS]


def _init(node: ast.ClassDef) -> ast.FunctionDef:
    (init,) = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    return init


def test_components_are_found() -> None:
    assert {"InferenceServer", "Gateway", "RedisCache", "ExistingCluster", "EksCluster"} <= set(IDS)


@pytest.mark.parametrize(("path", "node", "cls"), COMPONENTS, ids=IDS)
def test_signature_is_name_args_opts(path: Path, node: ast.ClassDef, cls: type) -> None:
    params = list(inspect.signature(cls.__init__).parameters.values())
    assert [p.name for p in params] == ["self", "name", "args", "opts"]
    assert params[-1].default is None
    args_type = typing.get_type_hints(cls.__init__)["args"]
    assert args_type.__name__ == f"{cls.__name__}Args"
    assert issubclass(args_type, Args), "XArgs derives from components.specs.Args (frozen, unknown fields refused)"
    assert args_type.model_config["frozen"] is True and args_type.model_config["extra"] == "forbid"


def test_type_tokens_are_inferstack_module_class_and_unique() -> None:
    tokens = {}
    for _, node, cls in COMPONENTS:
        (call,) = [
            n
            for n in ast.walk(_init(node))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "__init__"
        ]
        token = call.args[0]
        assert isinstance(token, ast.Constant), f"{cls.__name__}: the type token is a literal"
        package, module, name = token.value.split(":")
        assert (package, name) == ("inferstack", cls.__name__), token.value
        assert module.isidentifier() and module.islower(), token.value
        tokens[token.value] = cls.__name__
    assert len(tokens) == len(COMPONENTS), "two components share a type token"


@pytest.mark.parametrize(("path", "node", "cls"), COMPONENTS, ids=IDS)
def test_register_outputs_comes_last(path: Path, node: ast.ClassDef, cls: type) -> None:
    last = _init(node).body[-1]
    assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call), ast.unparse(last)
    assert isinstance(last.value.func, ast.Attribute) and last.value.func.attr == "register_outputs", ast.unparse(last)


def _field_docstrings(node: ast.ClassDef) -> dict[str, str | None]:
    docs: dict[str, str | None] = {}
    for i, statement in enumerate(node.body):
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            after = node.body[i + 1] if i + 1 < len(node.body) else None
            is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            docs[statement.target.id] = after.value.value if is_doc else None  # type: ignore[union-attr]
    return docs


@pytest.mark.parametrize(("path", "node", "cls"), COMPONENTS, ids=IDS)
def test_every_required_argument_says_why_it_is_required(path: Path, node: ast.ClassDef, cls: type) -> None:
    # GIVEN the component's XArgs, as its module defines it
    args_type = typing.get_type_hints(cls.__init__)["args"]
    (args_node,) = [
        n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == args_type.__name__
    ]
    docs = _field_docstrings(args_node)
    # WHEN a field has no default THEN its docstring gives the reason a user must supply it
    undocumented = [name for name, field in args_type.model_fields.items() if field.is_required() and not docs[name]]
    assert undocumented == [], f"{args_type.__name__}: required fields without a docstring"


@pytest.mark.parametrize("stack", ["dev", "prod", "onprem", "edge"])
def test_in_a_bundled_plan_every_resource_hangs_under_a_component(stack: str, plan_of: Callable[[str], Plan]) -> None:
    resources = plan_of(stack).resources
    index = {r.urn: r for r in resources}
    components = {r.urn for r in resources if not r.custom and r.type.startswith("inferstack:")}
    orphans = []
    for r in resources:
        if r.custom:
            parent = r.parent
            while parent is not None and parent not in components:
                parent = index[parent].parent if parent in index else None
            if parent is None:
                orphans.append(r.urn)
    assert orphans == []


@pytest.mark.parametrize("stack", ["dev", "prod", "onprem", "edge"])
def test_in_a_bundled_plan_every_kubernetes_object_names_its_provider(
    stack: str, plan_of: Callable[[str], Plan]
) -> None:
    resources = plan_of(stack).resources
    providers = {r.urn for r in resources if r.type == "pulumi:providers:kubernetes"}
    objects = [r for r in resources if r.custom and r.type.startswith("kubernetes:")]
    assert objects
    assert [r.urn for r in objects if r.provider not in providers] == []
