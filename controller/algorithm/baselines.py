"""Baseline planners: unicast, shortest-path-tree, Steiner-tree and greedy multicast.

Each takes a `Network` and the jobs and returns the chosen structures; `run`
in `controller.algorithm` turns them into plans with the shared rate allocation.
"""

from __future__ import annotations

from .model import Job, Structure
from .network import Network
from .structures import unicast_structure


def unicast(net: Network, jobs: tuple[Job, ...]) -> list[Structure]:
    """Every PS sends one copy per worker along unicast routes."""
    return [unicast_structure(net, *net.job_nodes(j)) for j in jobs]
