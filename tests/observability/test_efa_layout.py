"""The EFA interface layout rule shared by the managed launch template and Karpenter's EC2NodeClass."""

from __future__ import annotations

from collections import Counter

import pytest

from components.aws.efa import efa_interface_layout
from components.catalog.instances import INSTANCES, instance


@pytest.mark.parametrize(("instance_type", "efa_only"), [("p5.48xlarge", 32), ("p5en.48xlarge", 16)])
def test_one_ena_plus_one_efa_only_per_efa_interface(instance_type: str, efa_only: int) -> None:
    # GIVEN an EFA instance type from the catalog
    # WHEN its interface layout is derived
    types = Counter(i.interface_type for i in efa_interface_layout(instance(instance_type)))
    # THEN it has exactly one ENA interface and one efa-only per EFA interface (1+32 / 1+16)
    assert types == {"interface": 1, "efa-only": efa_only}


def test_primary_interface_is_ena_on_card_0_device_0() -> None:
    # GIVEN p5.48xlarge
    # WHEN its layout is derived
    layout = efa_interface_layout(instance("p5.48xlarge"))
    # THEN card 0 / device 0 is ENA (efa-only may not be primary) and card 0 / device 1 is efa-only
    assert tuple(layout[0]) == (0, 0, "interface")
    assert tuple(layout[1]) == (0, 1, "efa-only")


def test_other_cards_get_device_0_efa_only() -> None:
    # GIVEN p5en.48xlarge (16 network cards)
    # WHEN its layout is derived
    rest = efa_interface_layout(instance("p5en.48xlarge"))[2:]
    # THEN every other card carries one efa-only interface at device 0
    assert [tuple(i) for i in rest] == [(card, 0, "efa-only") for card in range(1, 16)]


def test_no_layout_without_efa() -> None:
    # GIVEN g6e.xlarge, which has no EFA
    # WHEN its layout is derived
    # THEN there is none: EC2's default single ENA interface applies
    assert efa_interface_layout(instance("g6e.xlarge")) == []


@pytest.mark.parametrize("instance_type", [t for t, s in INSTANCES.items() if s.efa])
def test_at_most_one_efa_only_per_card(instance_type: str) -> None:
    # GIVEN any EFA type in the catalog
    # WHEN its layout is derived
    layout = efa_interface_layout(instance(instance_type))
    # THEN no card carries two efa-only interfaces and no (card, device) pair repeats (Karpenter's CEL rules)
    cards = Counter(i.network_card_index for i in layout if i.interface_type == "efa-only")
    assert max(cards.values()) == 1
    assert len({(i.network_card_index, i.device_index) for i in layout}) == len(layout)
