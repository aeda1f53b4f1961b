"""The northbound: what people and training code talk to.

Owns the REST API (`api`: the app, its conversions and the server; `models`:
the JSON it answers and accepts; `errors`: the error answers; `middleware`: the
token, the body limit and, with several instances, the follower gate;
`browser`: the Host allowlist, JSON-only writes and the security headers;
`limits`: the rate limit and the caps on requests and event streams; `paging`:
the pages of /jobs and /plan), its
Prometheus metrics (`metrics`) and the web view (`ui`).

May import `controller.core` (every request is handed to the core's parts),
`controller.config`, `controller.store` (its errors) and the layers below. It
does not import the southbound: nothing here plans or talks to switches.
"""
