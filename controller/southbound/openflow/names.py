"""Names of OpenFlow datapaths: which switch a datapath id is.

A declared topology's n-th switch (from 0) has datapath id n + 1, unless
`southbound.switches.NAME.dpid` gives another (`config.switch_backends`). In a
discovered network a datapath is named `of:<its id in 16 hex digits>` (ONOS's
convention), unless the config gives it a name by its datapath id.
"""

from __future__ import annotations

from controller.algorithm.model import Topology
from controller.config import Config, configured_switches, switch_backends


def openflow_name(dpid: int) -> str:
    """The name of a discovered OpenFlow datapath: `of:` and its id in 16 hex digits."""
    return f"of:{dpid:016x}"


def switch_dpids(topology: Topology, config: Config | None = None) -> dict[int, str]:
    """dpid -> switch name of a declared topology: the datapath id `config` gives
    a switch (`southbound.switches.NAME.dpid`), else n + 1 for the n-th switch
    (from 0). (In a learned network a datapath is named `of:<dpid in 16 hex
    digits>` instead: `learned_dpids`.)"""
    if config is None:
        return {i + 1: topology.name(v) for i, v in enumerate(topology.switches)}
    return {b.dpid: name for name, b in switch_backends(config, topology).items() if b.dpid is not None}


def learned_dpids(topology: Topology) -> dict[int, str]:
    """dpid -> switch name for the `of:` switches of a learned network."""
    out = {}
    for v in topology.switches:
        name = topology.name(v)
        if name.startswith("of:"):
            out[int(name[3:], 16)] = name
    return out




def datapath_names(config: Config, topology: Topology) -> dict[int, str]:
    """dpid -> switch name of every datapath this controller knows by name: the
    declared topology's, or, in a discovered network, the `of:` switches found so
    far and those the config names."""
    if not config.discovers:
        return switch_dpids(topology, config)
    out = learned_dpids(topology)
    out.update({b.dpid: name for name, b in configured_switches(config).items() if b.backend == "openflow"})
    return out
