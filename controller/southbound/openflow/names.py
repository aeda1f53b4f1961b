"""Names of OpenFlow datapaths: which switch a datapath id is.

A declared topology's n-th switch (from 0) has datapath id n + 1, unless
`southbound.switches.NAME.dpid` gives another (`config.switch_backends`). In a
discovered network a datapath is named `of:<its id in 16 hex digits>` (ONOS's
convention), unless the config gives it a name by its datapath id.
"""

from __future__ import annotations

from controller.algorithm.model import Topology
from controller.config import Inventory


def openflow_name(dpid: int) -> str:
    """The name of a discovered OpenFlow datapath: `of:` and its id in 16 hex digits."""
    return f"of:{dpid:016x}"


def switch_dpids(topology: Topology) -> dict[int, str]:
    """dpid -> switch name of a declared topology whose config names no datapath
    id: n + 1 for the n-th switch (from 0). (The config's own ids:
    `Inventory.dpids`; in a discovered network a datapath is named `of:<dpid in
    16 hex digits>` instead: `learned_dpids`.)"""
    return {i + 1: topology.name(v) for i, v in enumerate(topology.switches)}


def learned_dpids(topology: Topology) -> dict[int, str]:
    """dpid -> switch name for the `of:` switches of a learned network."""
    out = {}
    for v in topology.switches:
        name = topology.name(v)
        if name.startswith("of:"):
            out[int(name[3:], 16)] = name
    return out




def datapath_names(inventory: Inventory, topology: Topology) -> dict[int, str]:
    """dpid -> switch name of every datapath this controller knows by name: the
    declared topology's (`Inventory.dpids`), or, in a discovered network, the
    `of:` switches found so far and those the config names."""
    out = learned_dpids(topology) if inventory.learned else {}
    out.update(inventory.dpids)
    return out
