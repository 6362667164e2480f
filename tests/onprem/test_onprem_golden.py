"""Golden renders of the bundled on-prem stack: every manifest and Helm values file ``inferstack plan --render``
writes, as committed YAML under ``tests/golden/onprem/`` ("to better track diffs across changes").

Refresh on purpose with ``UPDATE_SNAPSHOT=1 pytest tests/onprem/test_onprem_golden.py`` and review the diff.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

from inferstack_cli import render
from inferstack_cli.plan import Plan

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "onprem"


def test_onprem_renders_match_the_golden_files(plan_of: Callable[[str], Plan]) -> None:
    # GIVEN the bundled on-prem stack WHEN it is rendered
    files = {
        path: text
        for path, text in render.renders(plan_of("onprem").resources).items()
        if path.startswith(("manifests/", "helm/"))
    }
    assert files
    if os.environ.get("UPDATE_SNAPSHOT") == "1":
        for old in GOLDEN.rglob("*.yaml"):
            old.unlink()
        for path, text in files.items():
            (GOLDEN / path).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / path).write_text(text)
    # THEN each file is the reviewed one, and none is missing or extra
    on_disk = {p.relative_to(GOLDEN).as_posix() for p in GOLDEN.rglob("*.yaml")}
    assert sorted(on_disk ^ set(files)) == [], "files added or gone: refresh with UPDATE_SNAPSHOT=1 and review"
    for path, text in sorted(files.items()):
        expected = (GOLDEN / path).read_text()
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), "golden", "rendered"))
        assert text == expected, f"{path} differs from its golden file:\n{diff}"
