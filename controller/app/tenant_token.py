"""`python -m controller tenant-token NAME`: mint a tenant's API token.

Prints the new token once (stdout, its only copy: nothing stores it) and the line
for `api.tenants` (or an `api.tokens_file`) holding only its sha256, with the
quotas given as options. The name is checked as the config checks it.
"""

from __future__ import annotations

import argparse

from controller.arguments import EXIT_OK, note, positive_int, positive_number
from controller.config.tenants import check_name, mint_token, tenant_yaml


def cmd_tenant_token(args: argparse.Namespace) -> int:
    name = check_name(args.name, "NAME")
    token = mint_token()
    note(f"tenant {name}: hand the token below to the tenant (it is shown once and stored nowhere), and add the "
         "line after it under api.tenants in the controller's config (or to api.tokens_file); restart the controller")
    print(token)
    print(tenant_yaml(name, token, args.max_jobs, args.max_demand, args.max_workers))
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("tenant-token", help="mint a tenant's API token; print it once, and its config line (sha256)")
    p.add_argument("name", metavar="NAME", help="the tenant's name: lower-case letters, digits, '_' or '-', "
                                                "starting with a letter (at most 32)")
    p.add_argument("--max-jobs", type=positive_int, metavar="N", help="quota: jobs registered at once")
    p.add_argument("--max-demand", type=positive_number, metavar="BITS", help="quota: total demand in bit/s")
    p.add_argument("--max-workers", type=positive_int, metavar="N", help="quota: workers per job")
    p.set_defaults(run=cmd_tenant_token)
