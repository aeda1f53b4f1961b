"""`southbound.openflow.tls` and `southbound.p4runtime.tls`: paths relative to the
config file, all three files required, every bad value refused naming its key."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tls_helper  # noqa: E402

from controller.config import ConfigError, TlsFiles, config_from_dict, load_config  # noqa: E402


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    """ctl.{crt,key}, ctl-ca.crt from one CA; other.{crt,key} from another."""
    d = tmp_path_factory.mktemp("certs")
    tls_helper.pem_files(tls_helper.new_ca(), d, "ctl")
    tls_helper.pem_files(tls_helper.new_ca(), d, "other")
    return d


TLS = {"cert": "ctl.crt", "key": "ctl.key", "ca": "ctl-ca.crt"}


def config(backend: str, tls: dict, base: Path):
    return config_from_dict({"topology": {"fattree": {"k": 4}}, "southbound": {backend: {"tls": tls}}}, base)


def test_without_tls_the_southbound_is_plain():
    c = config_from_dict({"topology": {"fattree": {"k": 4}}})
    assert c.southbound.openflow.tls is None and c.southbound.p4runtime.tls is None


@pytest.mark.parametrize("backend", ["openflow", "p4runtime"])
def test_tls_paths_are_relative_to_the_config_file(certs, backend):
    cfg = certs / f"{backend}.yaml"
    cfg.write_text(f"topology: {{fattree: {{k: 4}}}}\nsouthbound: {{{backend}: {{tls: "
                   "{cert: ctl.crt, key: ctl.key, ca: ctl-ca.crt}}}\n")
    c = load_config(cfg)
    tls = getattr(c.southbound, backend).tls
    assert tls == TlsFiles(certs / "ctl.crt", certs / "ctl.key", certs / "ctl-ca.crt")
    other = "p4runtime" if backend == "openflow" else "openflow"
    assert getattr(c.southbound, other).tls is None


def test_absolute_paths_are_kept(certs, tmp_path):
    tls = {k: str(certs / v) for k, v in TLS.items()}
    assert config("openflow", tls, tmp_path).southbound.openflow.tls.cert == certs / "ctl.crt"


@pytest.mark.parametrize("backend", ["openflow", "p4runtime"])
@pytest.mark.parametrize(
    "change, where, message",
    [
        ({"cert": None}, "cert", "missing required key"),
        ({"key": None}, "key", "missing required key"),
        ({"ca": None}, "ca", "missing required key"),
        ({"cert": "nope.crt"}, "cert", "cannot read .*nope.crt"),
        ({"key": "nope.key"}, "key", "cannot read .*nope.key"),
        ({"ca": "nope.crt"}, "ca", "cannot read .*nope.crt"),
        ({"cert": 3}, "cert", "expected a string"),
        ({"cert": "ctl.key"}, "cert", "holds no PEM certificate"),
        ({"key": "ctl.crt"}, "key", "holds no PEM private key"),
        ({"ca": "ctl.key"}, "ca", "holds no PEM CA certificate"),
        ({"key": "other.key"}, "key", "is not the private key of"),
        ({"cert": "."}, "cert", "cannot read"),
        ({"extra": "x"}, "extra", "unknown key"),
    ],
)
def test_bad_tls_values_name_their_key(certs, backend, change, where, message):
    tls = {**TLS, **change}
    tls = {k: v for k, v in tls.items() if v is not None}
    with pytest.raises(ConfigError, match=rf"southbound\.{backend}\.tls(\.{where})?: .*{message}"):
        config(backend, tls, certs)


@pytest.mark.parametrize("backend", ["openflow", "p4runtime"])
def test_tls_must_be_a_mapping(certs, backend):
    with pytest.raises(ConfigError, match=rf"^southbound\.{backend}\.tls: expected a mapping"):
        config(backend, "ctl.crt", certs)


def test_a_ca_file_that_is_not_a_certificate_is_refused(certs):
    bad = certs / "bad-ca.crt"
    bad.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    with pytest.raises(ConfigError, match=r"^southbound\.p4runtime\.tls\.ca: .*does not load as CA certificates"):
        config("p4runtime", {**TLS, "ca": "bad-ca.crt"}, certs)


@pytest.mark.parametrize(
    "southbound, warned",
    [
        ({}, ["OpenFlow"]),
        ({"backend": "p4runtime"}, ["P4Runtime"]),
        ({"switches": {"core-0": {"backend": "p4runtime"}}}, ["OpenFlow", "P4Runtime"]),
        ({"openflow": {"tls": TLS}, "switches": {"core-0": {"backend": "p4runtime"}}}, ["P4Runtime"]),
        ({"backend": "p4runtime", "p4runtime": {"tls": TLS}}, []),
    ],
)
def test_one_warning_at_start_per_plain_backend_in_use(certs, caplog, southbound, warned):
    from controller.app.run import _warn_plain
    from controller.config import Inventory, build_topology

    c = config_from_dict({"topology": {"fattree": {"k": 4}}, "southbound": southbound}, certs)
    with caplog.at_level("WARNING", logger="controller.run"):
        _warn_plain(c, Inventory.of(c, build_topology(c)))
    got = [r.getMessage().split()[0] for r in caplog.records if "southbound is plain TCP" in r.getMessage()]
    assert got == warned
