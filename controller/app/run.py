"""`python -m controller run --config FILE`: the controller process.

One process runs the core (`core.service`: job store, debounced re-planning), the
REST API (uvicorn in a thread) and the backends: the OpenFlow 1.3 backend (its
manager, `southbound.openflow.manager`, and the os-ken app,
`southbound.openflow.app`) and the P4Runtime backend (`southbound.p4runtime.backend`).
This module only wires them together.

Start-up order matters: the OpenFlow manager subscribes to the plans before the
core plans once, and the core plans before the OpenFlow listener opens, so a
switch that connects (for example after a controller restart) is reconciled
against the real desired state, never against an empty one.

Switches whose `southbound` backend is `p4runtime` (docs/p4.md) are programmed
by the P4Runtime backend instead; their budgets are capped at what the P4
program holds before the core plans. The OpenFlow listener opens only if some
switch uses OpenFlow.

`--no-southbound` attaches no backend at all: the core plans and the API
serves the plans, no switch is programmed (benchmarks of the core and the API,
`bench-registration --no-southbound`, on a fabric the OpenFlow backend refuses
to hold: docs/controller.md, "The controller at k=48").

Where the OpenFlow listener listens is given on the command line: `--of-host`
(default 127.0.0.1) and `--of-port` (default 6653); what the OpenFlow switches
get is the config's `southbound.openflow` section. With `southbound.openflow.tls`
the listener on that port speaks TLS only (os-ken's `ctl_privkey`, `ctl_cert`,
`ca_certs`: a switch must present a certificate the CA signs); a refused handshake
is counted (`switch_tls`, /metrics) and logged as one WARNING naming the peer
(`_reporting_listener`). Without TLS on a backend in use, one WARNING at start says that
its switches are not authenticated (docs/security.md). With a declared topology,
switch n (from 0) has datapath id n + 1 unless `southbound.switches.NAME.dpid`
gives another (`config.Inventory`); ports
start as the default port map and are learned by the app's own signed LLDP probes
(`southbound.lldp`; os-ken's topology app is not loaded) and from hosts' ARP (see `southbound.openflow.app`).
Without a `topology` section the network is learned: every datapath that
connects is a switch named `of:<dpid>` (or the name `southbound.switches` gives
its dpid), the P4Runtime targets listed in `southbound.switches` join as they
connect, LLDP gives the links and hosts' ARP and IPv4 their places
(`core.discovered`).

With `store.backend: etcd` several instances share one store and elect a leader
(`store.election`, `app.cluster`, docs/ha.md): every instance opens its API and its OpenFlow
listener (every switch connects to every instance), but only the leader plans
and programs; a follower answers REST writes with 307 to the leader (503 while
there is none), sends its switches SLAVE role requests and keeps reloading the
jobs from the store. The P4Runtime backend runs on the leader only, with the
term as its election id.

os-ken 4.x runs its hub on native threads that cannot be killed; they are
started from a daemon thread, so they are daemon threads too, and SIGINT/SIGTERM
stop the process by stopping the app's worker, the API and the service, then
letting the interpreter exit.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import ssl
import sys
import threading
from types import SimpleNamespace, TracebackType

from controller.app import heap
from controller.arguments import port_number

log = logging.getLogger("controller.run")

# a TLS handshake on the OpenFlow port that takes longer is refused: an idle peer
# must not hold a listener thread for ever (os-ken sets its own socket timeout after)
TLS_HANDSHAKE_TIMEOUT_S = 10.0


def _reporting_listener(counters):
    """os-ken's listener class (`os_ken.lib.hub.StreamServer`), reporting refused TLS
    handshakes. os-ken wraps every accepted socket in TLS in a thread of its own, and
    its native hub drops that thread's exception without a word, so a switch without
    a certificate the CA signs would go unnoticed; here it is counted (`switch_tls`)
    and logged by `Counters.refused` (one WARNING per peer address per minute). A
    handshake is given TLS_HANDSHAKE_TIMEOUT_S. The switch's connection is handed
    on as a `SerializedTls`: os-ken reads and writes it from two threads, which one
    SSLSocket does not survive (`southbound.openflow.tls_socket`)."""
    from os_ken.lib.hub import StreamServer

    from controller.southbound.openflow.tls_socket import SerializedTls

    class ReportingStreamServer(StreamServer):
        def __init__(self, listen_info, handle=None, backlog=None, spawn="default", **ssl_args) -> None:
            datapath = handle

            def serialized(tls_sock, addr) -> None:  # os-ken reads and writes it from two threads
                datapath(SerializedTls(tls_sock), addr)

            super().__init__(listen_info, serialized if ssl_args else handle, backlog, spawn, **ssl_args)
            handle = self.handle

            def guarded(sock, addr) -> None:
                sock.settimeout(TLS_HANDSHAKE_TIMEOUT_S)
                try:
                    handle(sock, addr)
                except OSError as e:  # ssl.SSLError included
                    if not _in_handshake(e.__traceback__):
                        raise
                    sock.close()
                    counters.refused("switch_tls", switch=f"OpenFlow peer {addr[0]}",
                                     why=f"TLS handshake failed (from port {addr[1]}): {getattr(e, 'reason', None) or e}")

            self.handle = guarded

    return ReportingStreamServer


def _in_handshake(tb: TracebackType | None) -> bool:
    """True if the traceback passes through the TLS handshake (ssl's do_handshake)."""
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "do_handshake" and code.co_filename == ssl.__file__:
            return True
        tb = tb.tb_next
    return False


def _warn_plain(config, inventory) -> None:
    """One WARNING per backend in use without TLS (docs/security.md)."""
    sb = config.southbound
    if inventory.uses("openflow") and sb.openflow.tls is None:
        log.warning("OpenFlow southbound is plain TCP: switches are not authenticated and the channel is not "
                    "encrypted, so anything that reaches the OpenFlow port can connect as a switch "
                    "(configure southbound.openflow.tls; docs/security.md)")
    if inventory.uses("p4runtime") and sb.p4runtime.tls is None:
        log.warning("P4Runtime southbound is plain TCP: the switches are not authenticated and the channel is not "
                    "encrypted, so anything on the path can pose as a switch or read and alter its programming "
                    "(configure southbound.p4runtime.tls; docs/security.md)")


def _start_openflow(service, manager, host: str, port: int, tls=None):
    """Load the os-ken app, listen for switches (over TLS only with `tls`, a
    `config.TlsFiles`); returns the app instance."""
    try:
        import os_ken  # noqa: F401
    except ImportError:
        raise RuntimeError("os-ken is not installed (pip install os-ken)") from None
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager

    import os_ken.controller.controller  # noqa: F401 - registers the ofp-* options

    args = ["--ofp-listen-host", host, "--ofp-tcp-listen-port", str(port)]
    if tls is not None:
        # os-ken then listens with TLS only, on its ssl port, and with ca_certs
        # requires a client certificate the CA signs (CERT_REQUIRED)
        args += ["--ofp-ssl-listen-port", str(port), "--ctl-privkey", str(tls.key), "--ctl-cert", str(tls.cert),
                 "--ca-certs", str(tls.ca)]
        os_ken.controller.controller.StreamServer = _reporting_listener(service.counters)
    cfg.CONF(args=args, project="os_ken", default_config_files=[])
    # echo every second; a switch that leaves 3 unanswered is dead. Without echoes,
    # os-ken (native threads) notices a closed connection only when it next sends.
    cfg.CONF.set_override("echo_request_interval", 1.0)
    cfg.CONF.set_override("maximum_unreplied_echo_requests", 3)
    os_ken_apps = AppManager.get_instance()
    os_ken_apps.load_apps(["controller.southbound.openflow.app"])
    contexts = os_ken_apps.create_contexts()
    ready = threading.Event()
    holder: dict = {}

    def boot() -> None:
        try:
            # threads started from this daemon thread are daemon threads as well
            os_ken_apps.instantiate_apps(**contexts)
            app = next(a for a in os_ken_apps.applications.values() if type(a).__name__ == "MulticastOFCtl")
            app.attach(service, manager)
            holder["app"] = app
        except BaseException as e:  # noqa: BLE001 - reported to the main thread
            holder["error"] = e
        finally:
            ready.set()

    # instantiate opens the listener before `attach` runs; the features handler
    # waits for `attach`, so a switch that connects in between is not lost.
    thread = threading.Thread(target=boot, name="os-ken", daemon=True)
    thread.start()
    ready.wait(30)
    if "error" in holder:
        raise holder["error"]
    if "app" not in holder:
        raise RuntimeError("the OpenFlow app did not start within 30 s")
    return holder["app"]


def _p4runtime() -> SimpleNamespace:
    """The P4Runtime backend's `start_backend` and `report_p4_limits` (they need the
    `p4runtime` extra, grpcio and the stubs: imported only when a switch uses P4Runtime)."""
    try:
        from controller.southbound.p4runtime.start import start_backend
        from controller.southbound.p4runtime.pipeline import report_p4_limits
    except ImportError as e:
        raise RuntimeError(f"the P4Runtime backend needs grpcio and p4runtime (pip install -e '.[p4runtime]'): {e}") from None
    return SimpleNamespace(start_backend=start_backend, report_p4_limits=report_p4_limits)


def _check_listen(host: str, port: int) -> None:
    """Raise OSError now if (host, port) cannot be bound: os-ken binds in a thread of
    its own and would only log the failure."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))


class _P4Mastership:
    """HA: the P4Runtime backend runs while this instance leads, its election id
    the term (a newer leader's is larger: the switch makes it primary and refuses
    the writes of the old one)."""

    def __init__(self, service, config) -> None:
        self.service, self.config = service, config
        self.backend = None
        self._lock = threading.Lock()

    def take_mastership(self, term: int) -> None:
        with self._lock:
            if self.backend is not None:
                self.backend.shutdown()
            self.backend = _p4runtime().start_backend(self.service, self.config, election_id=term)

    def release_mastership(self, term: int) -> None:  # noqa: ARG002
        with self._lock:
            backend, self.backend = self.backend, None
        if backend is not None:
            backend.shutdown()

    def shutdown(self) -> None:
        self.release_mastership(0)


def cmd_run(args: argparse.Namespace) -> int:
    from controller.config import build_topology, load_config
    from controller.core.service import ControllerService
    from controller.northbound.api import serve
    from controller.southbound.openflow.manager import OpenFlowManager

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    config = load_config(args.config)  # ConfigError: one `error:` line, exit 2 (cli.main)
    try:
        # no topology: the switches that connect (and that the config lists) are the network
        topology = None if config.discovers else build_topology(config)
        service = ControllerService(config, topology)
        if not args.no_southbound:
            _warn_plain(config, service.inventory)
        p4 = service.inventory.uses("p4runtime") and not args.no_southbound
        if p4:  # what the P4 switches can hold, before the first plan
            _p4runtime().report_p4_limits(service, config)
    except (ValueError, OSError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    stop = threading.Event()

    def on_signal(signum, frame) -> None:  # noqa: ARG001
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    ha = config.store.backend == "etcd"
    api = app = p4app = cluster = None
    # the OpenFlow backend translates every plan from the first one on (in a learned
    # network any OpenFlow datapath may connect, unless the default backend is P4Runtime)
    if args.no_southbound:
        log.warning("--no-southbound: no backend is attached; plans are made and served over REST, no switch is "
                    "programmed (benchmarks of the core and the API)")
    try:
        uses_openflow = service.inventory.uses("openflow") and not args.no_southbound
        manager = OpenFlowManager(service).attach() if uses_openflow else None
    except ValueError as e:  # TooLarge: a fabric whose unicast routes would not fit in memory
        print(f"error: {e}", file=sys.stderr)
        service.close()
        return 2
    try:
        if ha:
            from controller.app.cluster import Cluster

            # the URL is known once the API listens; the cluster object exists before,
            # so that the API and the OpenFlow app see this instance as one of several
            service.cluster = cluster = Cluster(service, service.store, config, None)
        else:
            service.start()  # plans once now: switches are never reconciled against "no plan"
            heap.settle()  # the start-up plan's objects out of later full collections (app.heap)
        api = serve(service, config)
        log.info("REST API on %s", api.url)
        print(f"api listening on {api.url}", file=sys.stderr, flush=True)
        if ha:
            cluster.url = cluster.election.url = config.store.etcd.advertise_url or api.url
            if p4:
                p4app = _P4Mastership(service, config)
                cluster.southbounds.append(p4app)
        if p4 and not ha:
            try:
                p4app = _p4runtime().start_backend(service, config)
            except (ValueError, OSError, RuntimeError) as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            print(f"p4runtime: {len(service.inventory.p4runtime)} switches", file=sys.stderr, flush=True)
        if manager is not None:
            try:
                _check_listen(args.of_host, args.of_port)
                app = _start_openflow(service, manager, args.of_host, args.of_port, config.southbound.openflow.tls)
            except RuntimeError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            except OSError as e:
                print(f"error: cannot listen for OpenFlow on {args.of_host}:{args.of_port}: {e}", file=sys.stderr)
                return 2
            tls = " (TLS)" if config.southbound.openflow.tls is not None else ""
            print(f"openflow listening on {args.of_host}:{args.of_port}{tls}", file=sys.stderr, flush=True)
            if ha:
                cluster.southbounds.append(app)
        if ha:
            cluster.start()
            print(f"ha: instance {cluster.instance}, etcd {', '.join(config.store.etcd.endpoints)}", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            if cluster is not None and app is not None and cluster.leader_term() is not None:
                app.follow_term(cluster.leader_term())
        log.info("stopping")
        return 0
    finally:
        if cluster is not None:
            cluster.stop()  # resigns: another instance takes over at once
        if p4app is not None:
            p4app.shutdown()
        if app is not None:
            app.shutdown()
        if api is not None:
            api.stop()
        service.close()
        logging.shutdown()


def register(sub) -> None:
    p = sub.add_parser("run", help="run the controller: REST API, job store, planner and OpenFlow app")
    p.add_argument("--config", required=True, metavar="FILE", help="controller config (docs/controller.md)")
    p.add_argument("--of-host", default="127.0.0.1", metavar="ADDR", help="OpenFlow listen address (default 127.0.0.1)")
    p.add_argument("--of-port", type=port_number, default=6653, metavar="PORT", help="OpenFlow listen port (default 6653)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--no-southbound", action="store_true",
                   help="attach no backend: the core and the REST API only, no switch programmed (for benchmarks, "
                        "e.g. a fabric the OpenFlow backend cannot hold: docs/controller.md, \"The controller at k=48\")")
    p.set_defaults(run=cmd_run)
