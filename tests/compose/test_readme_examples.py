"""The README's Python examples that compose components run as written, under the mock engine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferstack_cli.plan import MockEngine

README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLES = [
    block for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "from components." in block
]


def test_the_readme_has_a_composition_example() -> None:
    assert EXAMPLES, "README.md: no ```python block imports from components"


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_composition_example_runs_as_written(example: str, engine: MockEngine) -> None:
    # GIVEN the block as a user would paste it into their own __main__.py WHEN it runs THEN it registers components
    exec(compile(example, "README.md (python example)", "exec"), {"__name__": "__main__"})
    components = {r.type for r in engine.settle() if not r.custom}
    assert components, "the example registered no component"
    assert all(t.startswith("inferstack:") for t in components)
