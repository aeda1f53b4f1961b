"""Whether two bfrt.json files of bf-p4c are the same schema, up to bf-p4c's nondeterminism.

bf-p4c 9.13.4 writes the Tofino 2 bfrt.json in one of two forms from run to run
(about one compile in ten, the same source and flags): its snapshot tables
(`pipe.snapshot.*`, the chip's debug capture, not this program's) come
ingress-first or egress-first, and `pipe.snapshot.cfg` gets a different id.
Everything else is byte for byte the same. `canonical` removes exactly that:
the tables in name order, and the snapshot tables' ids and dependency order.

    python3 p4src/tna/bfrt_same.py A.json B.json   # exit 0: the same schema

`make p4` keeps the committed bfrt.json when the new one is the same schema, so
a rebuild does not flip it; tests/test_p4_tofino.py compares with `canonical`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SNAPSHOT = "pipe.snapshot."


def canonical(data: dict) -> dict:
    """`data` (a parsed bfrt.json) without the parts bf-p4c varies between runs."""
    tables = []
    for table in data.get("tables", []):
        if table.get("name", "").startswith(SNAPSHOT):
            table = {k: v for k, v in table.items() if k != "id"}
            table["depends_on"] = sorted(table.get("depends_on", []))
        tables.append(table)
    return {**data, "tables": sorted(tables, key=lambda t: t.get("name", ""))}


def same(a: Path, b: Path) -> bool:
    return canonical(json.loads(Path(a).read_text())) == canonical(json.loads(Path(b).read_text()))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: bfrt_same.py A.json B.json")
    sys.exit(0 if same(Path(sys.argv[1]), Path(sys.argv[2])) else 1)
