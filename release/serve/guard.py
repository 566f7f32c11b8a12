"""The harness as the service runs it: `python -m redvox.release.serve.guard --connect-log
FILE --allow HOST ... -- <evaluate args>`. An audit hook records every socket connection
the evaluator makes and refuses any to an address other than loopback and the
maintainer's judge host, so audio can only reach the platform's own model process."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
import threading


def is_loopback(host: str) -> bool:
    """Whether HOST (an address, bracketed or with a zone, or `localhost`) is loopback."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def allowed_addresses(hosts: list[str]) -> set[str]:
    addresses = set()
    for host in hosts:
        for info in socket.getaddrinfo(host, None):
            addresses.add(info[4][0])
    return addresses


def install(log_path: str, hosts: list[str]) -> None:
    allowed = allowed_addresses(hosts)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # the maintainers'
    log = open(fd, "a", encoding="utf-8")  # noqa: SIM115 (lives as long as the process)
    lock = threading.Lock()

    def hook(event: str, args: tuple) -> None:
        if event != "socket.connect":
            return
        address = args[1]
        if not isinstance(address, tuple):  # a Unix socket: local by definition
            return
        host = str(address[0])
        ok = is_loopback(host) or host in allowed
        with lock:
            log.write(json.dumps({"host": host, "port": address[1], "allowed": ok}) + "\n")
            log.flush()
        if not ok:
            raise PermissionError(f"redvox serve: connection to {host} refused (not loopback)")

    sys.addaudithook(hook)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: guard --connect-log FILE [--allow HOST]... -- EVALUATE_ARGS", file=sys.stderr)
        return 2
    split = argv.index("--")
    own, rest = argv[:split], argv[split + 1 :]
    log_path, hosts = None, []
    for flag, value in zip(own[::2], own[1::2], strict=True):
        if flag == "--connect-log":
            log_path = value
        elif flag == "--allow":
            hosts.append(value)
    if log_path is None:
        print("guard: --connect-log is required", file=sys.stderr)
        return 2
    install(log_path, hosts)
    from redvox.release.evaluation.evaluate import cli

    return cli.main(rest, prog_name="evaluate", standalone_mode=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
