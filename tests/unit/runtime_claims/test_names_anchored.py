"""Names checked before they reach a path, a socket or a CDI spec match whole, to the last
character: `$` in a pattern also accepts a trailing newline ("…\n"), which would become part of
a file name. The names come from API-validated fields today; the checks must not rely on it."""

from __future__ import annotations

import uuid

import pytest
from topodra.common.cdi.spec import SpecError, validate_device_name, validate_vendor_or_class
from topodra.common.runtime import names, sockets

UID = str(uuid.uuid4())


def test_a_trailing_newline_is_not_part_of_any_name() -> None:
    assert names.is_uid(UID) and not names.is_uid(UID + "\n")
    assert names.is_dns_label("a-1") and not names.is_dns_label("a-1\n")
    assert names.is_dns_subdomain("a.b") and not names.is_dns_subdomain("a.b\n")
    assert sockets.check_pod_uid(UID) == UID
    with pytest.raises(ValueError):
        sockets.check_pod_uid(UID + "\n")
    with pytest.raises(ValueError):
        sockets.check_driver_name("cpu.topodra.io\n")
    validate_device_name("claim-0")
    validate_vendor_or_class("topodra.io", "vendor")
    with pytest.raises(SpecError):
        validate_device_name("claim-0\n")
    with pytest.raises(SpecError):
        validate_vendor_or_class("topodra.io\n", "vendor")
