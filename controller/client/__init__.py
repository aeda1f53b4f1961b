"""The training side's client of the controller: register a job, wait for its
plan, read its group address, rate and mode, and delete it (`Client`), plus the
`python -m controller jobs ...` command over it (`controller.client.cli`).

    from controller.client import Client

    client = Client("https://controller.example:8443", token, ca_file="ca.crt")
    with client.job("host-0", ["host-1", "host-5"], demand=1e9) as job:
        send(job.group_address, job.rate, job.ps_unicast)   # the training loop

Standard library only (urllib), so a training host needs nothing more than this
package (the `jobs` command's tables, not its `--json` output, use rich). Of the
rest of the project it imports only `controller.arguments` (the command's exit
codes and argument types, itself standard library only), and nothing in it may
import any other package of the project. See docs/controller.md, "Client
library and CLI".

`controller.client.broadcast` sends the model itself from the PS to the workers
over NORM (reliable multicast, RFC 5740) at the planned rate, through Debian's
libnorm1 bound with ctypes (`controller.client.norm`), its segments at the
planned (payload) rate and its frames within the job's meter
(`controller.client.normwire`: NORM's and the headers' bytes per packet; its
errors and report: `controller.client.outcome`); it is imported only when used,
so the rest of the client works without libnorm. Its objects are signed
with the job's key (`Job.auth_key`, which the controller gives only to the
registrant; `controller.client.objinfo` holds the signed object info).
`controller.client.phases.Announcement` tells the controller when the PS
broadcasts (`Client.broadcasting`), and applies the rate of the phase to the
sender while it lasts (phase-aware rates).
"""

from controller.client.client import DEFAULT_URL, Client, Job, decode_key, encode_key, new_job_id, new_key
from controller.client.errors import (
    ApiError,
    ClientError,
    Conflict,
    InsecureTransport,
    JobFailed,
    NotFound,
    RedirectRefused,
    Unauthorized,
    Unreachable,
    UntrustedCertificate,
    WaitTimeout,
)

__all__ = [
    "DEFAULT_URL",
    "ApiError",
    "Client",
    "ClientError",
    "Conflict",
    "InsecureTransport",
    "Job",
    "JobFailed",
    "NotFound",
    "RedirectRefused",
    "Unauthorized",
    "Unreachable",
    "UntrustedCertificate",
    "WaitTimeout",
    "decode_key",
    "encode_key",
    "new_job_id",
    "new_key",
]
