"""argparse types for flag values, so a wrong value stops the command at start with one line
that names the flag and the value (argparse prefixes the flag), never later as a warning, a
silent default or a traceback from deep inside a driver.

Each type only checks what can be known without the machine or the cluster; checks that need
them (reserved CPUs that this machine lacks) happen when a driver is created, and also fail
with one line and exit status 2.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
from pathlib import Path

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*\Z")
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}\Z")
# The oldest API server the drivers publish for: resource.k8s.io/v1 is GA from 1.34.
OLDEST_KUBERNETES = (1, 34)
_VERSION = re.compile(r"v?(\d+)\.(\d+)(\.\d+)?([-+].*)?\Z")


def _error(message: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(message)


def absolute_path(text: str) -> Path:
    """A host path the drivers hand to the kubelet or the runtime: those need absolute ones."""
    if not text or not os.path.isabs(text):
        raise _error(f"{text!r} is not an absolute path")
    if "\0" in text:
        raise _error(f"{text!r} holds a NUL byte")
    return Path(text)


def seconds(text: str) -> float:
    """A duration in seconds: finite and not negative (0 where a flag documents it as 'off')."""
    try:
        value = float(text)
    except ValueError:
        raise _error(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise _error(f"{text!r}: must be a finite number of seconds >= 0")
    return value


def ip_address(text: str) -> str:
    """An IPv4 or IPv6 address (no prefix length), in its canonical spelling."""
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise _error(f"{text!r} is not an IP address (such as 192.0.2.10 or 2001:db8::10)") from None


def readable_file(text: str) -> str:
    """A file that exists and can be read now (a typo would otherwise be ignored silently)."""
    if not os.path.isfile(text):
        raise _error(f"{text!r}: no such file")
    if not os.access(text, os.R_OK):
        raise _error(f"{text!r}: not readable")
    return text


def host_port(text: str) -> str:
    """`host:port`, `:port` (every interface) or `[v6]:port`, port 0-65535; empty: off."""
    if text == "":
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise _error(f"{text!r} is not host:port (such as :9400 or 127.0.0.1:9400)")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if bare and not _is_host(bare):
        raise _error(f"{text!r}: {bare!r} is neither an IP address nor a host name")
    if ":" in bare and not host.startswith("["):
        raise _error(f"{text!r}: write an IPv6 address in brackets, as [{bare}]:{port}")
    return text


def _is_host(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return bool(_DNS_SUBDOMAIN.match(text.lower())) and len(text) <= 253


def node_name(text: str) -> str:
    """A Kubernetes Node name (DNS subdomain); empty is left to the command (it may come later)."""
    if text and (len(text) > 253 or not _DNS_SUBDOMAIN.match(text)):
        raise _error(f"{text!r} is not a valid node name (lowercase DNS subdomain, at most 253 characters)")
    return text


def namespaced_name(text: str) -> str:
    """`NAMESPACE/NAME` of a namespaced object: a DNS label and a DNS subdomain (both become
    part of an API path, so nothing else may pass)."""
    ns, sep, name = text.partition("/")
    if (
        not sep
        or len(ns) > 63
        or not re.fullmatch(_DNS_LABEL, ns)
        or len(name) > 253
        or not _DNS_SUBDOMAIN.match(name)
    ):
        raise _error(f"{text!r} is not NAMESPACE/NAME (lowercase DNS names, such as ml/train-0-gpu)")
    return text


def uid(text: str) -> str:
    """An object UID (a pod's becomes part of socket file names): letters, digits and dashes."""
    if text and not _UID.match(text):
        raise _error(f"{text!r} is not a UID (letters, digits and '-', at most 64)")
    return text


def hostname(text: str) -> str:
    """A host name (DNS subdomain, any case), at most 64 characters as the kernel allows."""
    if not text or len(text) > 64 or not _DNS_SUBDOMAIN.match(text.lower()):
        raise _error(f"{text!r} is not a host name (letters, digits, '-' and '.', at most 64)")
    return text


def kubernetes_version(text: str) -> str:
    """`X.Y` (or vX.Y.Z) of an API server the drivers support (1.34 and newer)."""
    m = _VERSION.match(text.strip())
    if m is None:
        raise _error(f"{text!r} is not a Kubernetes version such as 1.34")
    minor = (int(m.group(1)), int(m.group(2)))
    if minor < OLDEST_KUBERNETES:
        oldest = ".".join(map(str, OLDEST_KUBERNETES))
        raise _error(f"{text!r} is older than {oldest}, the first with resource.k8s.io/v1 (DRA GA)")
    return text.strip()
