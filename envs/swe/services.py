"""Network services a repository's tests expect, run inside the grading sandbox only.

SWE-bench grades with network; gymfleet's grading sandbox has none. A spec naming a service
(``services: [httpbin]``; ``fixtures/drift.yaml`` names it for every psf/requests version) gets:

* at env-image build time (with network), the service installed in its own virtualenv under
  ``/opt/gymfleet/services/<name>`` (never the instance's environment: the package under test
  stays the repository's), with pinned requirements (:data:`HTTPBIN_REQUIREMENTS`), plus a local
  CA and a certificate for the service's host names;
* in the grading sandbox, after the eval setup and before the test command: the host names mapped
  to 127.0.0.1 in ``/etc/hosts`` and the servers started in the background, waited for (bounded:
  ``start_timeout_s``); a server that dies or does not listen in time fails the instance as an
  error that quotes the server's log, never a silent run against nothing;
* in the test command's environment, what makes its clients trust the local CA
  (``REQUESTS_CA_BUNDLE``: the system bundle plus the local CA).

The agent's episode sandbox (same image) never starts them and has no hosts entry: the servers
exist only while the grader runs the tests, in a fresh sandbox, from files outside ``/testbed``
that no patch reaches. Servers run with ``python -I`` from their own folder, so no file of the
(patched) repository can shadow a module they import.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

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
            ``tls/server.key``, ``tls/bundle.pem`` = the system's CAs plus the local one).
        test_env: environment of the test command (``{dir}`` is the service's folder).
    """

    name: str
    hosts: tuple[str, ...]
    requirements: tuple[str, ...]
    servers: tuple[Server, ...]
    tls: bool = False
    test_env: dict[str, str] = field(default_factory=dict)
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
    hosts=("httpbin.org",),
    requirements=HTTPBIN_REQUIREMENTS,
    servers=(
        Server(80, _gunicorn("--bind", "127.0.0.1:80")),
        Server(443, _gunicorn("--bind", "127.0.0.1:443", "--certfile", "tls/server.pem",
                              "--keyfile", "tls/server.key")),
    ),
    tls=True,
    test_env={"REQUESTS_CA_BUNDLE": "{dir}/tls/bundle.pem"},
)

SERVICES: dict[str, Service] = {HTTPBIN.name: HTTPBIN}
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
        venv_python = f"{svc.home}/bin/python"
        lines += [
            f"python -m venv {svc.home}",
            f"{venv_python} -m pip install -q --only-binary=:all: "
            + " ".join(shlex.quote(r) for r in svc.requirements),
        ]
        if svc.tls:
            lines += _tls_lines(svc)
    return lines


def _tls_lines(svc: Service) -> list[str]:
    tls = f"{svc.home}/tls"
    san = ",".join(f"DNS:{h}" for h in svc.hosts)
    subj = f"/CN={svc.hosts[0]}"
    return [
        f"mkdir -p {tls}",
        f"openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 36500 -subj "
        f"'/CN=gymfleet local {svc.name} CA' -keyout {tls}/ca.key -out {tls}/ca.pem "
        "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign",
        f"openssl req -newkey rsa:2048 -nodes -sha256 -subj '{subj}' -keyout {tls}/server.key "
        f"-out {tls}/server.csr",
        f"printf 'subjectAltName={san}\\nbasicConstraints=CA:FALSE\\n"
        f"extendedKeyUsage=serverAuth\\n' > {tls}/ext.cnf",
        f"openssl x509 -req -sha256 -days 36500 -in {tls}/server.csr -CA {tls}/ca.pem "
        f"-CAkey {tls}/ca.key -CAcreateserial -extfile {tls}/ext.cnf -out {tls}/server.pem",
        f"cat /etc/ssl/certs/ca-certificates.crt {tls}/ca.pem > {tls}/bundle.pem",
        f"rm -f {tls}/server.csr {tls}/ext.cnf {tls}/ca.key",
    ]


def start_script(services: Iterable[Service], timeout_s: float = START_TIMEOUT_S) -> str:
    """Shell run as root in the grading sandbox before the test command: map the hosts, start
    every server in the background, wait until each listens. Exits 0 when all do; else prints
    which one failed and the tail of its log, and exits 1.

    Args:
        timeout_s: the bound on the wait for all ports, seconds.
    """
    lines = ["set -u", "fail() { echo \"gymfleet service: $1\"; "
             "[ -f \"$2\" ] && tail -n 30 \"$2\"; exit 1; }"]
    waits: list[str] = []
    for svc in services:
        for host in svc.hosts:
            lines.append(f"grep -qE '^127\\.0\\.0\\.1[[:space:]]+{host}$' /etc/hosts "
                         f"|| echo '127.0.0.1 {host}' >> /etc/hosts")
        lines.append(f"[ -x {svc.home}/bin/python ] || fail '{svc.name} is not installed in this "
                     f"image ({svc.home}; official SWE-bench images lack it): let gymfleet build "
                     "the image (SWEImagesConfig.try_official = false)' /dev/null")
        for server in svc.servers:
            log = f"{svc.home}/server-{server.port}.log"
            argv = " ".join(shlex.quote(a) for a in server.argv)
            lines.append(f"(cd {svc.home} && exec setsid {svc.home}/bin/python -I {argv} "
                         f"</dev/null >{log} 2>&1) &")
            lines.append(f"pid_{server.port}=$!")
            waits.append(
                f"until (exec 3<>/dev/tcp/127.0.0.1/{server.port}) 2>/dev/null; do "
                f"kill -0 \"$pid_{server.port}\" 2>/dev/null || fail '{svc.name} on port "
                f"{server.port} exited before listening' {log}; "
                f"[ \"$SECONDS\" -lt {int(timeout_s)} ] || fail '{svc.name} on port "
                f"{server.port} did not listen within {int(timeout_s)} s' {log}; sleep 0.2; done")
    return "\n".join([*lines, "SECONDS=0", *waits, "echo 'gymfleet services: ready'"]) + "\n"


def test_env(services: Iterable[Service]) -> dict[str, str]:
    """The test command's environment variables that ``services`` need."""
    env: dict[str, str] = {}
    for svc in services:
        env |= {k: v.format(dir=svc.home) for k, v in svc.test_env.items()}
    return env
