"""The etcd store over TLS with client certificates and etcd's own auth (issue 23,
docs/ha.md): a private etcd (tests/etcd_helper.py) started with --cert-file,
--key-file, --client-cert-auth and --trusted-ca-file (certificates from trustme),
a user with a role that may read and write the prefix, another without a role,
and auth enabled (through the gateway's /v3/auth/*: Debian's etcd-server ships
no etcdctl). The store and the leader election work over it; a client without
the client certificate, a wrong password, a user without the role and a client
without a user are refused with a clear error. etcd's tokens live 1 s here, so
the client's renewal of an expired token is exercised too.
"""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import replace

import pytest
import requests

import etcd_helper
import tls_helper
from controller.algorithm.model import Job
from controller.config import config_from_dict
from controller.config.schema import TlsFiles
from controller.config.strict import ConfigError
from controller.store.base import StoreError
from controller.store.factory import open_store

PREFIX = "/mc-tls/"
PASSWORD = "controller-pw-for-tests"
TOKEN_TTL_S = 1


def b64(text: str | bytes) -> str:
    return base64.b64encode(text if isinstance(text, bytes) else text.encode()).decode()


def client_files(ca, where, name: str) -> dict:
    """A client certificate without a Common Name (etcd 3.4's gateway refuses one
    with a CN while auth is enabled), its key and the CA."""
    files = tls_helper.pem_files(ca, where, name)
    cert = ca.issue_cert("127.0.0.1")
    files["cert"].write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    files["key"].write_bytes(cert.private_key_pem.bytes())
    return files


class Secured:
    """The etcd server, its certificates, and the users the test set up."""

    def __init__(self, tmp) -> None:
        from controller.store.etcd import prefix_end

        self.ca = tls_helper.new_ca()
        self.server_files = tls_helper.pem_files(self.ca, tmp / "server", "etcd-server")
        self.client = client_files(self.ca, tmp / "client", "controller")
        self.with_cn = tls_helper.pem_files(self.ca, tmp / "cn", "has-a-cn")
        other_ca = tls_helper.new_ca()
        self.foreign = client_files(other_ca, tmp / "foreign", "foreign")  # signed by another CA
        self.server = etcd_helper.EtcdServer(tmp, tls=self.server_files, args=("--auth-token-ttl", str(TOKEN_TTL_S)))
        self.server.start()
        self.url = self.server.url
        session = requests.Session()
        session.trust_env = False
        session.verify = str(self.client["ca"])
        session.cert = (str(self.client["cert"]), str(self.client["key"]))
        for path, body in [
            ("auth/role/add", {"name": "root"}),
            ("auth/user/add", {"name": "root", "password": "root-pw"}),
            ("auth/user/grant", {"user": "root", "role": "root"}),
            ("auth/role/add", {"name": "mcast"}),
            ("auth/role/grant", {"name": "mcast", "perm": {"permType": "READWRITE", "key": b64(PREFIX),
                                                           "range_end": b64(prefix_end(PREFIX))}}),
            ("auth/user/add", {"name": "controller", "password": PASSWORD}),
            ("auth/user/grant", {"user": "controller", "role": "mcast"}),
            ("auth/user/add", {"name": "norole", "password": PASSWORD}),
            ("auth/enable", {}),
        ]:
            r = session.post(f"{self.url}/v3/{path}", json=body, timeout=5)
            assert r.status_code == 200, (path, r.text)

    def tls(self, files: dict | None = None) -> TlsFiles:
        files = files or self.client
        return TlsFiles(files["cert"], files["key"], files["ca"])

    def store(self, *, tls: TlsFiles | None = None, user: str | None = "controller", password: str | None = PASSWORD):
        from controller.store.etcd import EtcdClient, EtcdJobStore

        client = EtcdClient([self.url], 2.0, tls=tls or self.tls(), user=user, password=password)
        return EtcdJobStore(client, PREFIX)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    reason = etcd_helper.unavailable()
    if reason:
        pytest.skip(reason)
    s = Secured(tmp_path_factory.mktemp("etcd-tls"))
    yield s
    s.server.stop()


def test_the_store_works_over_tls_and_auth_and_renews_an_expired_token(secured):
    store = secured.store()
    job = Job(f"j-{uuid.uuid4().hex[:6]}", "h0", ("h1", "h2"), 1e9, 1.0)
    added = store.add(job, "239.9.0.1", b"k" * 32)
    assert store.get(job.id) == added
    time.sleep(TOKEN_TTL_S + 1.5)  # etcd forgets the token: the client gets a new one
    store.put_state("x", {"a": 1})
    assert store.get_state("x") == {"a": 1}
    store.set_group_addresses({job.id: "239.9.0.2"})
    assert store.get(job.id).group_address == "239.9.0.2"
    assert store.delete(job.id) and store.get(job.id) is None


def test_the_leader_election_works_over_tls_and_auth(secured):
    from controller.store.election import Election

    key = f"{PREFIX}leader-{uuid.uuid4().hex[:6]}"
    elected: list[int] = []
    stores = [secured.store() for _ in range(2)]
    first = Election(stores[0].client, key, "i0", "http://i0", 2, on_elected=elected.append, poll_s=0.1).start()
    try:
        deadline = time.monotonic() + 10
        while not first.leading and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.leading and elected == [first.term]
        second = Election(stores[1].client, key, "i1", "http://i1", 2, poll_s=0.1).start()
        try:
            deadline = time.monotonic() + 10
            while second.leader is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not second.leading and second.leader.instance == "i0"
            # the leader fences its writes with its term, over the same secured client
            stores[0].fence(key, first.term)
            stores[0].put_state("fenced", 1)
            first.stop()
            deadline = time.monotonic() + 10
            while not second.leading and time.monotonic() < deadline:
                time.sleep(0.05)
            assert second.leading and second.term > elected[0]
        finally:
            second.stop()
    finally:
        first.stop()


def test_a_client_without_the_client_certificate_is_refused(secured):
    from controller.store.etcd import EtcdClient, EtcdJobStore

    client = EtcdClient([secured.url], 2.0, user="controller", password=PASSWORD)
    session = client._clients[0].session  # verifies the server, sends no certificate
    session.trust_env, session.verify = False, str(secured.client["ca"])
    with pytest.raises(StoreError, match="cannot open the job store: no etcd endpoint answered.*TLS refused"):
        EtcdJobStore(client, PREFIX)
    with pytest.raises(StoreError, match="TLS refused"):  # a client certificate of another CA
        secured.store(tls=TlsFiles(secured.foreign["cert"], secured.foreign["key"], secured.client["ca"]))
    with pytest.raises(StoreError, match="TLS refused.*CERTIFICATE_VERIFY_FAILED"):  # etcd not signed by this CA
        secured.store(tls=secured.tls(secured.foreign))


def test_a_wrong_password_is_refused_with_a_clear_error(secured):
    from controller.store.etcd import EtcdAuthError

    with pytest.raises(EtcdAuthError, match="user 'controller' was refused: .*invalid user ID or password"):
        secured.store(password="not-the-password")


def test_a_user_without_the_role_and_a_client_without_a_user_are_refused(secured):
    from controller.store.etcd import EtcdAuthError

    with pytest.raises(EtcdAuthError, match="user 'norole' was refused: .*permission denied"):
        secured.store(user="norole")
    with pytest.raises(EtcdAuthError, match="without a user .* was refused: .*user name is empty"):
        secured.store(user=None, password=None)
    with pytest.raises(EtcdAuthError, match="certificate without a CN"):
        secured.store(tls=secured.tls(secured.with_cn))


# -- the config -------------------------------------------------------------------------------

def etcd_config(tmp_path, **etcd):
    return config_from_dict({"topology": {"fattree": {"k": 4}}, "store": {"backend": "etcd", "etcd": etcd}}, tmp_path)


def test_the_config_opens_the_secured_store(secured, tmp_path, monkeypatch):
    monkeypatch.setenv("ETCD_PW_FOR_TEST", PASSWORD)
    tls = {k: str(v) for k, v in secured.client.items()}
    config = etcd_config(tmp_path, endpoints=[secured.url], prefix=PREFIX, tls=tls, user="controller",
                         password_env="ETCD_PW_FOR_TEST")
    e = config.store.etcd
    assert e.user == "controller" and e.password == PASSWORD and e.tls.ca == secured.client["ca"]
    assert PASSWORD not in repr(config)
    store = open_store(config.store)
    store.put_state("from-config", True)
    assert store.get_state("from-config") is True
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    by_file = etcd_config(tmp_path, endpoints=[secured.url], prefix=PREFIX, tls=tls, user="controller", password_file="pw")
    assert by_file.store.etcd.password == PASSWORD
    open_store(by_file.store).get_state("from-config")
    with pytest.raises(StoreError, match="was refused"):
        open_store(replace(by_file.store, etcd=replace(by_file.store.etcd, password="wrong")))


@pytest.mark.parametrize("etcd, field, message", [
    ({"user": "controller"}, "store.etcd.user", "needs password_env or password_file"),
    ({"password_env": "HOME"}, "store.etcd.user", "required with password_env"),
    ({"user": "c", "password_env": "NOT_SET_ANYWHERE_X"}, "store.etcd.password_env", "is not set"),
    ({"user": "c", "password_env": "HOME", "password_file": "pw"}, "store.etcd.password_file", "either"),
    ({"user": "c", "password_file": "missing"}, "store.etcd.password_file", "cannot read"),
    ({"user": " c", "password_env": "HOME"}, "store.etcd.user", "expected an etcd user name"),
    ({"tls": {"ca": "x"}}, "store.etcd.tls", ""),
])
def test_bad_etcd_access_settings_are_refused_naming_the_field(tmp_path, etcd, field, message):
    with pytest.raises(ConfigError, match=rf"{field.replace('[', '.').replace(']', '.')}.*{message}"):
        etcd_config(tmp_path, **etcd)


def test_tls_needs_https_endpoints(tmp_path):
    ca = tls_helper.new_ca()
    files = {k: str(v) for k, v in client_files(ca, tmp_path, "c").items()}
    with pytest.raises(ConfigError, match=r"store.etcd.endpoints.0.*every endpoint must be https://"):
        etcd_config(tmp_path, endpoints=["http://127.0.0.1:2379"], tls=files)


def test_a_user_against_an_etcd_without_auth_is_a_clear_error(tmp_path):
    from controller.store.etcd import EtcdAuthError, EtcdClient, EtcdJobStore

    reason = etcd_helper.unavailable()
    if reason:
        pytest.skip(reason)
    with etcd_helper.EtcdServer(tmp_path) as server:
        with pytest.raises(EtcdAuthError, match="user 'controller' was refused: .*authentication is not enabled"):
            EtcdJobStore(EtcdClient([server.url], 2.0, user="controller", password=PASSWORD), PREFIX)
