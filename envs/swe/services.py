"""What a repository's tests expect of the network, supplied inside the grading sandbox only.

SWE-bench grades with network; gymfleet's grading sandbox has none. A spec naming services
(``services: [httpbin, tarpit]``; ``fixtures/drift.yaml`` names both for every psf/requests
version) gets:

* at env-image build time (with network), each service installed under
  ``/opt/gymfleet/services/<name>``: httpbin and gunicorn in their own virtualenv with pinned
  requirements (:data:`HTTPBIN_REQUIREMENTS`; never the instance's environment: the package under
  test stays the repository's), a local CA and a certificate for the service's host names;
  Debian packages a service needs (``iproute2`` for the tarpit);
* in the grading sandbox, after the eval setup and before the test command
  (:func:`start_script`): the host names mapped to 127.0.0.1 in ``/etc/hosts``, the local CA
  appended to the CA bundles the tests' clients verify against, the unroutable addresses routed
  into loopback (the sandbox then needs CAP_NET_ADMIN: :func:`needs_net_admin`), and the servers
  started in the background and waited for (bounded); a server that dies or does not listen in
  time, or a route that cannot be added, fails the instance as an error that quotes the server's
  log, never a silent run against nothing.

The agent's episode sandbox (same image) never starts them, has no hosts entry and no
CAP_NET_ADMIN: they exist only while the grader runs the tests, in a fresh sandbox, from files
outside ``/testbed`` that no patch reaches. Servers run with ``python -I`` from their own
folder, so no file of the (patched) repository can shadow a module they import.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from gymfleet.envs.swe.errors import SpecNotFoundError

SERVICES_DIR = "/opt/gymfleet/services"
START_TIMEOUT_S = 60
"""Default bound on the wait for every port of a service to listen, seconds."""

HTTPBIN_REQUIREMENTS = (
    # httpbin 0.10.4 and its dependency closure for Python 3.9-3.11 (resolved 2026-12 for
    # CPython 3.9, all wheels), plus gunicorn: httpbin.org runs httpbin under gunicorn.
    "httpbin==0.10.4", "Flask==3.1.3", "Werkzeug==3.1.9", "Jinja2==3.1.6", "MarkupSafe==3.0.4",
    "itsdangerous==2.2.0", "click==8.1.8", "blinker==1.9.0", "brotlicffi==1.2.1.0", "cffi==2.0.0",
    "pycparser==2.23", "decorator==5.3.1", "six==1.17.0", "greenlet==2.0.2", "gunicorn==23.0.0",
    "packaging==26.3",
)


@dataclass(frozen=True)
class Server:
    """One listening process of a service.

    Attributes:
        port: TCP port on 127.0.0.1.
        argv: the command (run from the service's folder with its venv's python).
    """

    port: int
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Service:
    """A network service some repository's tests call by host name.

    Attributes:
        name: the name a spec lists (``httpbin``).
        hosts: host names resolved to 127.0.0.1 while the tests run.
        requirements: pinned pip requirements installed into the service's own venv.
        servers: the processes started for the tests, each waited for on its port.
        tls: make a local CA and a certificate for ``hosts`` (``tls/ca.pem``, ``tls/server.pem``,
            ``tls/server.key``).
        trust: CA bundles the local CA is appended to in the grading sandbox, where they exist
            (``{site}/`` stands for each site-packages folder of the sandbox's Python): the
            bundles the tests' clients verify against, as the real host's CA is in them.
        unroutable: addresses routed into the loopback device in the grading sandbox, where the
            kernel drops them: a connect there waits for the client's timeout, as on the
            internet, instead of failing at once (``Network is unreachable``). Needs
            CAP_NET_ADMIN in the sandbox's own network namespace (still no network).
        apt_packages: Debian packages the env image installs for the service.
    """

    name: str
    hosts: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    servers: tuple[Server, ...] = ()
    tls: bool = False
    trust: tuple[str, ...] = ()
    unroutable: tuple[str, ...] = ()
    apt_packages: tuple[str, ...] = ()
    root: str = SERVICES_DIR
    """The folder the service's own folder is made in."""

    @property
    def home(self) -> str:
        """The service's folder in the image (its venv, certificates and logs)."""
        return f"{self.root}/{self.name}"


def _gunicorn(*extra: str) -> tuple[str, ...]:
    # gthread workers: a slow endpoint (/delay/10) must not block the others
    return ("-m", "gunicorn", "--chdir", ".", "--worker-class", "gthread", "--workers", "2",
            "--threads", "16", "--timeout", "120", *extra, "httpbin:app")


HTTPBIN = Service(
    name="httpbin",
    # www.google.co.uk: the off-host redirect target of requests' test_auth_is_stripped_on_redirect
    # _off_host (any page answers; the test checks that the Authorization header was dropped)
    hosts=("httpbin.org", "www.google.co.uk"),
    requirements=HTTPBIN_REQUIREMENTS,
    servers=(
        Server(80, _gunicorn("--bind", "127.0.0.1:80")),
        Server(443, _gunicorn("--bind", "127.0.0.1:443", "--certfile", "tls/server.pem",
                              "--keyfile", "tls/server.key")),
    ),
    tls=True,
    # requests verifies against its own cacert.pem (in the repository up to 2.15), or certifi's
    trust=("/etc/ssl/certs/ca-certificates.crt", "/testbed/requests/cacert.pem",
           "{site}/certifi/cacert.pem", "{site}/requests/cacert.pem"),
)

TARPIT = Service(
    name="tarpit",
    # requests' TARPIT tests (test_connect_timeout, test_total_timeout_connect) expect a connect
    # to 10.255.255.1 to time out
    unroutable=("10.255.255.1/32",),
    apt_packages=("iproute2",),
)

SERVICES: dict[str, Service] = {HTTPBIN.name: HTTPBIN, TARPIT.name: TARPIT}
"""Every service a spec may name, by name."""


def resolve(names: Iterable[str]) -> list[Service]:
    """The services called ``names``.

    Raises:
        SpecNotFoundError: a name no service has (the message lists the known ones).
    """
    unknown = [n for n in names if n not in SERVICES]
    if unknown:
        raise SpecNotFoundError(
            f"unknown service(s) {', '.join(unknown)} in the spec's `services`; known: "
            f"{', '.join(sorted(SERVICES))} (envs/swe/services.py)")
    return [SERVICES[n] for n in names]


def install_lines(services: Iterable[Service]) -> list[str]:
    """The env image's build lines (bash, ``set -e``) that install ``services``: a venv each,
    its pinned requirements, and its TLS files."""
    lines: list[str] = []
    for svc in services:
        lines.append(f"mkdir -p {svc.home}")
        if svc.apt_packages:
            lines.append("apt-get update -qq && apt-get install -y -qq --no-install-recommends "
                         + " ".join(svc.apt_packages) + " && rm -rf /var/lib/apt/lists/*")
        if svc.requirements:
            lines += [f"python -m venv {svc.home}",
                      f"{svc.home}/bin/python -m pip install -q --only-binary=:all: "
                      + " ".join(shlex.quote(r) for r in svc.requirements)]
        if svc.tls:
            lines += _tls_lines(svc)
    return lines


def _tls_lines(svc: Service) -> list[str]:
    # Own config file, not the distribution's openssl.cnf: Debian's already adds basicConstraints
    # to `req -x509`, and a second one (-addext) makes OpenSSL 1.1.1 reject the CA.
    tls = f"{svc.home}/tls"
    config = (
        "[req]\\ndistinguished_name = dn\\nprompt = no\\n[dn]\\nCN = unused\\n"
        "[ca]\\nbasicConstraints = critical,CA:TRUE\\nkeyUsage = critical,keyCertSign,cRLSign\\n"
        "subjectKeyIdentifier = hash\\n"
        f"[server]\\nsubjectAltName = {','.join(f'DNS:{h}' for h in svc.hosts)}\\n"
        "basicConstraints = critical,CA:FALSE\\nkeyUsage = critical,digitalSignature,keyEncipherment\\n"
        "extendedKeyUsage = serverAuth\\nsubjectKeyIdentifier = hash\\n"
        "authorityKeyIdentifier = keyid,issuer\\n")
    cnf = f"-config {tls}/openssl.cnf"
    return [
        f"mkdir -p {tls}",
        f"printf '{config}' > {tls}/openssl.cnf",
        f"openssl req {cnf} -x509 -extensions ca -newkey rsa:2048 -nodes -sha256 -days 36500 "
        f"-subj '/CN=gymfleet local {svc.name} CA' -keyout {tls}/ca.key -out {tls}/ca.pem",
        f"openssl req {cnf} -new -newkey rsa:2048 -nodes -sha256 -subj '/CN={svc.hosts[0]}' "
        f"-keyout {tls}/server.key -out {tls}/server.csr",
        f"openssl x509 -req -sha256 -days 36500 -in {tls}/server.csr -CA {tls}/ca.pem "
        f"-CAkey {tls}/ca.key -CAcreateserial -extfile {tls}/openssl.cnf -extensions server "
        f"-out {tls}/server.pem",
        f"openssl verify -CAfile {tls}/ca.pem {tls}/server.pem",
        f"rm -f {tls}/server.csr {tls}/ca.key",
    ]


def start_script(services: Iterable[Service], timeout_s: float = START_TIMEOUT_S) -> str:
    """Shell run as root in the grading sandbox before the test command: map the hosts, add the
    local CAs to the trusted bundles, route the unroutable addresses, start every server in the
    background and wait until each listens. Exits 0 when all is done; else prints what failed
    (and the tail of the server's log) and exits 1.

    Args:
        timeout_s: the bound on the wait for all ports, seconds.
    """
    lines = ["set -u", "fail() { echo \"gymfleet service: $1\"; "
             "[ -f \"$2\" ] && tail -n 30 \"$2\"; exit 1; }",
             # the sandbox Python's site-packages folders, asked from / (no repository module)
             "sites=$(cd / && python -I -c 'import site; print(\" \".join(site.getsitepackages()))' "
             "2>/dev/null || true)"]
    waits: list[str] = []
    for svc in services:
        lines += _setup_lines(svc)
        for server in svc.servers:
            log = f"{svc.home}/server-{server.port}.log"
            argv = " ".join(shlex.quote(a) for a in server.argv)
            lines += [f"(cd {svc.home} && exec setsid {svc.home}/bin/python -I {argv} "
                      f"</dev/null >{log} 2>&1) &", f"pid_{server.port}=$!"]
            waits.append(
                f"until (exec 3<>/dev/tcp/127.0.0.1/{server.port}) 2>/dev/null; do "
                f"kill -0 \"$pid_{server.port}\" 2>/dev/null || fail '{svc.name} on port "
                f"{server.port} exited before listening' {log}; "
                f"[ \"$SECONDS\" -lt {int(timeout_s)} ] || fail '{svc.name} on port "
                f"{server.port} did not listen within {int(timeout_s)} s' {log}; sleep 0.2; done")
    return "\n".join([*lines, "SECONDS=0", *waits, "echo 'gymfleet services: ready'"]) + "\n"


def _setup_lines(svc: Service) -> list[str]:
    """The installed check, hosts, trusted CA and routes of one service."""
    missing = (f"fail '{svc.name} is not installed in this image ({svc.home}; official "
               "SWE-bench images lack it): let gymfleet build the image "
               "(SWEImagesConfig.try_official = false)' /dev/null")
    lines = [f"[ -d {svc.home} ] || {missing}"]
    if svc.servers:
        lines.append(f"[ -x {svc.home}/bin/python ] || {missing}")
    for host in svc.hosts:
        lines.append(f"grep -qE '^127\\.0\\.0\\.1[[:space:]]+{host}$' /etc/hosts "
                     f"|| echo '127.0.0.1 {host}' >> /etc/hosts")
    for bundle in svc.trust:
        append = f"if [ -f \"$f\" ]; then cat {svc.home}/tls/ca.pem >> \"$f\"; fi"
        if bundle.startswith("{site}/"):
            lines.append(f'for s in $sites; do f="$s"/{bundle.removeprefix("{site}/")}; '
                         f"{append}; done")
        else:
            lines.append(f"f={shlex.quote(bundle)}; {append}")
    for address in svc.unroutable:
        lines.append(f"ip route replace {address} dev lo 2>&1 || fail '{svc.name}: cannot route "
                     f"{address} into lo (the grading sandbox needs CAP_NET_ADMIN)' /dev/null")
    return lines


def needs_net_admin(services: Iterable[Service]) -> bool:
    """True when a service routes addresses (the grading sandbox then needs CAP_NET_ADMIN)."""
    return any(svc.unroutable for svc in services)
