"""The README's Python examples that compose components run as written, under the mock engine, and the files and
names it points a reader to exist."""

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


ROOT = README.parent
PATH = re.compile(r"`((?:\.ci|benchmarks|components|images|inferstack_cli|policies|stacks|tests)/[^`\s]*)`")


def test_every_repository_path_the_readme_names_exists() -> None:
    # GIVEN each `dir/.../file` (a placeholder such as <stack> stands for any name) and `file.py:NAME` in the README
    missing = []
    for written in sorted(set(PATH.findall(README.read_text()))):
        path, _, name = written.partition(":")
        matches = sorted(ROOT.glob(re.sub(r"<[^>]+>", "*", path).rstrip("/")))
        # WHEN it is looked up in the repository THEN the file or folder is there, and so is the name it defines
        if not matches or (name and not re.search(rf"^{re.escape(name)}\b", matches[0].read_text(), re.M)):
            missing.append(written)
    assert missing == [], f"README.md names what the repository does not have: {missing}"
