"""Pages of `GET /jobs` and `GET /plan`: a bounded answer at any number of jobs.

Both lists come in pages of `limit` items (default `DEFAULT_LIMIT`, at most
`MAX_LIMIT`; more is a 400, not a silent cut), each answer with `next`: the
path of the next page, or null on the last one. A client follows `next` until it
is null (the client library and the web UI do).

- `GET /jobs?limit=N&after=SEQ`: the jobs the principal may see, in creation
  order, after the cursor. The cursor is a job's creation sequence number
  (increasing, never reused), so a job deleted or registered between two pages
  neither shifts nor repeats the others.
- `GET /plan?limit=N&offset=M&generation=G`: the plan's `jobs` (a tenant's own
  only) from `offset`; the rest of the plan (λ, the switches' table use) on
  every page. A page is of one plan generation: `next` names it, and a page
  asked of another generation than the served one is a 409 `plan_changed` (the
  client starts again from the first page). The plan is converted to the plan
  format once (api.py keeps it while it is served), not once per page.

Bad paging parameters (not an integer, out of range) are 400 `invalid_query`
naming the parameter (`errors.validation_response`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlencode

from controller.core.errors import ServiceError

DEFAULT_LIMIT = 500  # items of a page when the request gives no `limit`
MAX_LIMIT = 5000  # the largest `limit` accepted (a larger one is a 400)

T = TypeVar("T")


class PlanChanged(ServiceError):
    """A page of /plan asked of a generation that is no longer served (409)."""

    code = "plan_changed"


@dataclass(frozen=True)
class Page:
    """One page of a list: its items and the path of the next page (None: the last)."""

    items: list
    next: str | None


def page_after(items: Sequence[T], keys: Sequence[int], limit: int, after: int | None, path: str) -> Page:
    """The first `limit` of `items` whose key (in `keys`, increasing) is above
    `after`; `next` continues after the last one given."""
    start = 0
    if after is not None:
        start = next((i for i, k in enumerate(keys) if k > after), len(keys))
    chosen = list(items[start:start + limit])
    more = start + limit < len(items)
    nxt = f"{path}?{urlencode({'limit': limit, 'after': keys[start + limit - 1]})}" if more else None
    return Page(chosen, nxt)


def page_offset(items: Sequence[T], limit: int, offset: int, generation: int, path: str) -> Page:
    """`limit` of `items` from `offset`, of plan `generation`; `next` names the next offset and the generation."""
    chosen = list(items[offset:offset + limit])
    more = offset + limit < len(items)
    nxt = (f"{path}?{urlencode({'limit': limit, 'offset': offset + limit, 'generation': generation})}"
           if more else None)
    return Page(chosen, nxt)


def check_generation(asked: int | None, served: int) -> None:
    """PlanChanged if a page was asked of another generation than the served one."""
    if asked is not None and asked != served:
        raise PlanChanged(f"plan generation {asked} is no longer served (now {served}): start again from the first page",
                          "generation")
