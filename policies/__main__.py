from pulumi_policy import PolicyPack
from policies.rules import POLICIES

PolicyPack(name="inferstack", policies=POLICIES)  # type: ignore[arg-type]
