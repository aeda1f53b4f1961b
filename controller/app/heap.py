"""The controller process's heap and CPython's cyclic garbage collector.

A served plan's translation is large: at k=16 with 200 jobs the OpenFlow
backend's desired state holds about 670,000 entries, millions of Python objects
that live as long as the plan. A full (generation 2) collection of the cyclic
collector traverses every one of them: 1-2 s at that size, in whichever thread
allocated last, often a request's. After the start-up plan the first
registration waited for such a collection: about 2 s instead of 50 ms (issue 25,
`tests/test_admission_probe.py`).

`settle()` collects once and then freezes what survives (`gc.freeze`): later
collections skip those objects. Objects freed by reference counting are freed
as before, frozen or not; only cyclic garbage among the frozen objects would
never be collected, and after a full collection there is none. The controller
process calls it once, after its start-up plan (`app.run`). Objects made by
later full plans are not frozen: a full collection over a new translation can
still fall on a request after a re-optimisation.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect every generation, then move what survives out of the collector's
    reach (`gc.freeze`)."""
    gc.collect()
    gc.freeze()
