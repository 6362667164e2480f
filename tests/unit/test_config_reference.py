"""The README's config reference names every key the stack config accepts (issue 11: "the config reference covers
every new key"). A key added to a spec without a row, or a brace list, in a reference table fails here: a key counts
as documented at its whole path (``gateway.requestsPerMinute``), so a leaf name that a row of another section uses
(``gateway.apiKeys[].requestsPerMinute``) does not stand in for it."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator

from pydantic import BaseModel

from helpers import ROOT
from stacks.environment import CloudEnvironment, EdgeEnvironment, OnpremEnvironment

_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]*(\.[A-Za-z][A-Za-z0-9]*)*")


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


def _row_paths(row: str) -> set[str]:
    """The key paths one `| key | default | meaning |` row documents.

    Its key cell names whole paths (`gateway.replicas`, list items as `apiKeys[]`) and siblings of the path before
    them (`` `gateway.replicas` / `maxReplicas` ``); its meaning cell names the row key's fields, in a brace list
    (`{tenant, keySha256, name?}`) or as code (`` `enabled`, `maxReplicas` ``)."""
    cells = row.strip().strip("|").split("|")
    paths: list[str] = []
    parent = ""
    for span in re.findall(r"`([^`]+)`", cells[0]):
        key = span.replace("[]", "")
        if not _KEY.fullmatch(key):
            continue
        if "." in key:
            parent = key.rsplit(".", 1)[0]
        paths.append(key if "." in key or not parent else f"{parent}.{key}")
    if not paths:
        return set()
    row_key = paths[0]
    braces = re.findall(r"\{([^}]*)\}", cells[-1])
    fields = [name.strip().rstrip("?") for listed in braces for name in listed.split(",")]
    fields += re.findall(r"`([^`]+)`", cells[-1])
    paths += [key if "." in key else f"{row_key}.{key}" for key in fields if _KEY.fullmatch(key)]
    # A documented key documents the sections it sits in (`models.slo.ttftP99Ms`: `models.slo`, `models`).
    return {".".join(p.split(".")[: i + 1]) for p in paths for i in range(p.count(".") + 1)}


def _reference_paths(readme: str) -> set[str]:
    """Every key path the README's `| key ... |` tables document."""
    paths: set[str] = set()
    in_table = False
    for line in readme.splitlines():
        if line.startswith("| key"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            paths |= _row_paths(line)
    return paths


def test_every_config_key_is_in_the_readme_reference() -> None:
    documented = _reference_paths((ROOT / "README.md").read_text())
    assert len(documented) > 100  # the tables were found
    environments = (CloudEnvironment, OnpremEnvironment, EdgeEnvironment)
    missing = sorted({key for env in environments for key in _keys(env) if key not in documented})
    assert missing == [], f"keys with no row (or brace list) in a README `| key |` table: {missing}"


def test_the_check_sees_an_undocumented_key() -> None:
    class Undocumented(BaseModel):
        hopefully_never_a_key_name: int = 0

    class Root(BaseModel):
        gateway: Undocumented | None = None

    keys = list(_keys(Root))
    assert keys == ["gateway", "gateway.hopefully_never_a_key_name"]
    readme = "| key | default | meaning |\n|---|---|---|\n| `gateway.enabled` | `true` | the gateway |\n"
    assert [k for k in keys if k not in _reference_paths(readme)] == ["gateway.hopefully_never_a_key_name"]


def test_a_leaf_name_documented_elsewhere_does_not_stand_in_for_a_key() -> None:
    # GIVEN a table that names requestsPerMinute only as a field of apiKeys[], and siblings after a `/`
    readme = (
        "| key | default | meaning |\n|---|---|---|\n"
        "| `gateway.apiKeys[]` | required | `{tenant, requestsPerMinute?}` |\n"
        "| `gateway.replicas` / `maxReplicas` | 2 / 10 | the HPA |\n"
    )
    # WHEN the documented paths are read
    documented = _reference_paths(readme)
    # THEN the gateway's own requestsPerMinute is not documented, and the row's fields and siblings are
    assert "gateway.requestsPerMinute" not in documented
    assert {"gateway.apiKeys.requestsPerMinute", "gateway.apiKeys.tenant", "gateway.maxReplicas"} <= documented
