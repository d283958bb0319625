"""Checks for names that come from the API server and end up in file names or CDI names.

A crafted ResourceClaim must not be able to steer a write outside our folders (`../`, `/`), so
everything that becomes part of a path is matched against a strict pattern first.
"""

from __future__ import annotations

import re

_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_uid(value: str) -> bool:
    """Kubernetes object UIDs and shareIDs: lowercase RFC 4122 text form."""
    return bool(_UID.fullmatch(value))


def is_dns_label(value: str) -> bool:
    return bool(_DNS_LABEL.fullmatch(value))


def is_dns_subdomain(value: str) -> bool:
    return len(value) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(value))


def is_request_name(value: str) -> bool:
    """`req` or `req/sub`, each a DNS label."""
    parts = value.split("/")
    return 1 <= len(parts) <= 2 and all(is_dns_label(p) for p in parts)


def main_request(value: str) -> str:
    """Container claim references use the main request name; `req/sub` -> `req`."""
    return value.split("/", 1)[0]
