"""The API server's name rules for what a ResourceSlice carries, as predicates
(docs/design/resourceslices.md).

Checked before publishing so that one bad name costs one device or attribute, not the whole
slice (the API server rejects a slice as a unit).
"""

from __future__ import annotations

import re

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_NUM = r"(0|[1-9]\d*)"
_PRE_ID = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER = re.compile(
    rf"{_NUM}\.{_NUM}\.{_NUM}(-{_PRE_ID}(\.{_PRE_ID})*)?(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?"
)
# Extended BDF as the upstream pciBusID helper accepts it (lowercase, 4-hex domain).
PCI_BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")
PCIE_ROOT = re.compile(r"pci[0-9a-f]{4,}:[0-9a-f]{2}")

DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
DRIVER_NAME_MAX = 63
ATTRIBUTE_DOMAIN_MAX = 63
ATTRIBUTE_ID_MAX = 32
POOL_NAME_MAX = 253
LABEL_VALUE_MAX = 63

STANDARD_PREFIX = "resource.kubernetes.io/"
# The only names defined under resource.kubernetes.io (docs/design/resourceslices.md); we never invent others.
STANDARD_ATTRIBUTES = frozenset({"pcieRoot", "pciBusID", "numaNode"})


def is_dns_label(value: str) -> bool:
    return len(value) <= DNS_LABEL_MAX and _DNS_LABEL.fullmatch(value) is not None


def is_dns_subdomain(value: str, max_len: int = DNS_SUBDOMAIN_MAX) -> bool:
    return len(value) <= max_len and _DNS_SUBDOMAIN.fullmatch(value) is not None


def is_driver_name(value: str) -> bool:
    return is_dns_subdomain(value, DRIVER_NAME_MAX)


def is_pool_name(value: str) -> bool:
    return 0 < len(value) <= POOL_NAME_MAX and all(is_dns_subdomain(part) for part in value.split("/"))


def qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a valid attribute/capacity QualifiedName, or None when it is."""
    if key.count("/") > 1:
        return "more than one '/'"
    domain, _, ident = key.rpartition("/")
    if "/" in key and not domain:
        return "empty domain before '/'"
    if domain and not is_dns_subdomain(domain, ATTRIBUTE_DOMAIN_MAX):
        return f"domain {domain!r} is not a DNS subdomain of at most {ATTRIBUTE_DOMAIN_MAX} characters"
    if not ident:
        return "empty identifier"
    if len(ident) > ATTRIBUTE_ID_MAX:
        return f"identifier {ident!r} is longer than {ATTRIBUTE_ID_MAX} characters"
    if _C_IDENTIFIER.fullmatch(ident) is None:
        return f"identifier {ident!r} is not a C identifier"
    return None


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a label key (taint keys follow this rule), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return f"prefix {prefix!r} is not a DNS subdomain"
    if not name or len(name) > DNS_LABEL_MAX or _LABEL_NAME.fullmatch(name) is None:
        return f"name {name!r} must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
    return None


def is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= LABEL_VALUE_MAX and _LABEL_NAME.fullmatch(value) is not None)


def is_semver(value: str) -> bool:
    return _SEMVER.fullmatch(value) is not None


def is_reserved_domain(key: str) -> bool:
    """`kubernetes.io` and its subdomains belong to Kubernetes; only the standard names may be used."""
    domain = key.rpartition("/")[0]
    return domain == "kubernetes.io" or domain.endswith(".kubernetes.io")
