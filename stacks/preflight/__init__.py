"""Preflight: read-only checks of a stack's config against the real account, before ``pulumi up``.

``inferstack plan`` proves the config is consistent with itself; preflight proves the account can
honour it: the instance types exist in their zones, the quota covers the pools, the reservations
match their pools, the AMI release and the Kubernetes version exist. Each check returns
``Finding`` rows; a ``Report`` gathers them and gives the verdict.

Tiers are plug-ins here too. Only the cloud tier rents capacity from an account, so only it has
checks (``stacks.preflight.aws``); ``NOT_COVERED`` says why the others have none.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["ok", "warn", "blocker"]
"""``blocker``: ``pulumi up`` would fail or run without the capacity asked for. ``warn``: it works, at a cost."""

TIERS = ("cloud",)
"""Tiers with preflight checks."""

NOT_COVERED = {
    "onprem": "an on-prem cluster's capacity is the hardware already racked; there is no account to ask",
    "edge": "an edge site runs on the machine it is installed on; there is no account to ask",
}
"""Tiers without checks, and why."""


@dataclass(frozen=True)
class Finding:
    """One row of the preflight table."""

    check: str
    """What was checked, e.g. ``instance offering``."""
    subject: str
    """What it was checked for, e.g. ``pool h100 (p5.48xlarge in us-east-1a)``."""
    verdict: Verdict
    detail: str
    """What the account answered; for a blocker or a warning, also the fix."""


@dataclass(frozen=True)
class Report:
    """Every finding for one stack, and the verdict they add up to."""

    stack: str
    region: str
    account: str
    findings: tuple[Finding, ...]

    @property
    def blockers(self) -> int:
        return sum(1 for f in self.findings if f.verdict == "blocker")

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.verdict == "warn")

    @property
    def ready(self) -> bool:
        """Warnings do not stop a deployment; blockers do."""
        return self.blockers == 0

    def verdict_line(self) -> str:
        counts = Counter(f.verdict for f in self.findings)
        parts = [
            f"{n} {word}{'' if n == 1 else 's'}"
            for n, word in ((counts["blocker"], "blocker"), (counts["warn"], "warning"))
            if n
        ]
        head = ", ".join(parts) if parts else f"{counts['ok']} checks passed"
        return f"preflight: {head} — {'ready' if self.ready else 'not ready'}"
