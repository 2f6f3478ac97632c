"""An Open OnDemand portal's front door for tests: Debian's Apache httpd on loopback, with the node
proxy (/node/HOST/PORT/...) configured as ood-portal-generator writes it, and a static dashboard page.

Follows Open OnDemand 4.0's ood-portal-generator template (ood-portal.conf.erb, the `node_uri`
LocationMatch: its Header edits of Location and Set-Cookie, then LuaHookFixups node_proxy.lua) and
mod_ood_proxy's node_proxy.lua; tests/support/ood_node_proxy.lua is the hook. No ProxyPreserveHost:
the session's server sees Host = HOST:PORT and Origin = the portal, as behind a real portal.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.jupyter_server import free_port

HTTPD = "apache2"
MODULES_DIR = Path("/usr/lib/apache2/modules")
MODULES = ["mpm_event", "authz_core", "mime", "headers", "proxy", "proxy_http", "proxy_wstunnel", "lua"]
NODE_PROXY_HOOK = Path(__file__).with_name("ood_node_proxy.lua")
# Chromium resolves every *.localhost name to loopback itself, so the portal gets an origin of its own.
PORTAL_HOST = "ondemand.localhost"

CONFIG = """\
# Written by tests/support/portal_proxy.py for one test run.
ServerRoot "{runtime}"
ServerName {server_name}
Listen 127.0.0.1:{port}
PidFile "{runtime}/httpd.pid"
DefaultRuntimeDir "{runtime}"
ErrorLog "{runtime}/error.log"
LogLevel warn
{load_modules}
{run_as}
TypesConfig /etc/mime.types
LogFormat "%h \\"%r\\" %>s" portal
CustomLog "{runtime}/access.log" portal
TraceEnable off
Timeout 300

DocumentRoot "{docroot}"
<Directory "{docroot}">
  Require all granted
</Directory>

LuaRoot "{runtime}"
# Reverse proxy traffic to backend webserver through IP sockets:
#   http://{server_name}:{port}/node/HOST/PORT/index.html -> http://HOST:PORT/node/HOST/PORT/index.html
<LocationMatch "^/node/(?<host>[^/]+)/(?<port>\\d+)">
  Require all granted

  # ProxyPassReverse implementation
  Header edit Location "^[^/]+//[^/]+" ""

  # ProxyPassReverseCookieDomain implementation
  Header edit* Set-Cookie ";\\s*(?i)Domain[^;]*" ""

  # ProxyPassReverseCookiePath implementation
  Header edit* Set-Cookie ";\\s*(?i)Path[^;]*" ""
  Header edit  Set-Cookie "^([^;]+)" "$1; Path=/node/%{{MATCH_HOST}}e/%{{MATCH_PORT}}e"

  LuaHookFixups node_proxy.lua node_proxy_handler
</LocationMatch>
"""


@dataclass
class Portal:
    origin: str
    runtime: Path
    process: subprocess.Popen

    @property
    def docroot(self) -> Path:
        return self.runtime / "docroot"

    def access_log(self) -> str:
        path = self.runtime / "access.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def error_log(self) -> str:
        path = self.runtime / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""


def write_config(runtime: Path, port: int) -> Path:
    load_modules = "\n".join(f"LoadModule {name}_module {MODULES_DIR / f'mod_{name}.so'}" for name in MODULES)
    # httpd will not serve as root: its workers become www-data, which must read the hook and the page.
    run_as = "User www-data\nGroup www-data" if os.geteuid() == 0 else ""
    config = CONFIG.format(runtime=runtime, server_name=PORTAL_HOST, port=port, load_modules=load_modules,
                           run_as=run_as, docroot=runtime / "docroot")
    path = runtime / "httpd.conf"
    path.write_text(config)
    return path


def wait_until_listening(process: subprocess.Popen, portal: Portal, port: int, timeout: float = 30) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"apache2 exited with {process.returncode}:\n{portal.error_log()}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"apache2 not listening on 127.0.0.1:{port} after {timeout} s:\n{portal.error_log()}")


@contextlib.contextmanager
def running_portal():
    """The portal on a free loopback port; stopped (and its folder removed) afterwards."""
    httpd = shutil.which(HTTPD) or shutil.which(HTTPD, path="/usr/sbin:/sbin")
    if httpd is None:
        raise FileNotFoundError("apache2 not found; install with: apt-get install apache2")
    # Outside pytest's private tmp folders: the www-data workers must read these files.
    runtime = Path(tempfile.mkdtemp(prefix="course-portal-"))
    runtime.chmod(0o755)
    (runtime / "docroot").mkdir(mode=0o755)
    shutil.copy(NODE_PROXY_HOOK, runtime / "node_proxy.lua")
    port = free_port()
    config = write_config(runtime, port)
    check = subprocess.run([httpd, "-t", "-f", str(config)], capture_output=True, text=True, timeout=30)
    if check.returncode != 0:
        raise RuntimeError(f"apache2 rejected its config:\n{check.stdout}{check.stderr}")
    process = subprocess.Popen([httpd, "-f", str(config), "-DFOREGROUND"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.STDOUT, start_new_session=True)
    portal = Portal(f"http://{PORTAL_HOST}:{port}", runtime, process)
    try:
        wait_until_listening(process, portal, port)
        yield portal
    finally:
        stop(process)
        shutil.rmtree(runtime, ignore_errors=True)


def stop(process: subprocess.Popen) -> None:
    """httpd's graceful-stop signal, then its whole process group if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
