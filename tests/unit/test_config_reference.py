"""The README's config reference names every key the stack config accepts (issue 11: "the config reference covers
every new key"). A key added to a spec without a row, or a brace list, in a reference table fails here."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator

from pydantic import BaseModel

from helpers import ROOT
from stacks.environment import CloudEnvironment, EdgeEnvironment, OnpremEnvironment


def _models(annotation: object) -> Iterator[type[BaseModel]]:
    """The pydantic models inside a field's type: `X | None`, `tuple[X, ...]`, `dict[str, X]`, `Annotated[X, ...]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models(arg)


def _keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, field in model.model_fields.items():
        path = prefix + (field.alias or name)
        yield path
        for sub in _models(field.annotation):
            yield from _keys(sub, path + ".")


def _reference_names() -> set[str]:
    """Every camelCase name written in code inside a row of one of the README's `| key ... |` tables."""
    names: set[str] = set()
    in_table = False
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("| key"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table:
            for span in re.findall(r"`([^`]+)`", line):
                names.update(re.findall(r"[A-Za-z][A-Za-z0-9]*", span))
    return names


def test_every_config_key_is_in_the_readme_reference() -> None:
    documented = _reference_names()
    assert len(documented) > 100  # the tables were found
    environments = (CloudEnvironment, OnpremEnvironment, EdgeEnvironment)
    missing = sorted({key for env in environments for key in _keys(env) if key.split(".")[-1] not in documented})
    assert missing == [], f"keys with no mention in a README `| key |` table: {missing}"


def test_the_check_sees_an_undocumented_key() -> None:
    class Undocumented(BaseModel):
        hopefully_never_a_key_name: int = 0

    class Root(BaseModel):
        gateway: Undocumented | None = None

    names = _reference_names()
    keys = list(_keys(Root))
    assert keys == ["gateway", "gateway.hopefully_never_a_key_name"]
    assert [k for k in keys if k.split(".")[-1] not in names] == ["gateway.hopefully_never_a_key_name"]
