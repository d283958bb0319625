"""Uevents as udevd sends them, through the kernel's uevent netlink socket.

udevd passes each processed event on to its listeners as a netlink multicast to group 2 with a
"libudev" header (magic 0xfeedcafe in network order, then the header size, the offset and
length of the NUL-separated properties, and the MurmurHash2 of the subsystem that listeners'
socket filters match on). A test that sends such a message as root reaches every udev-source
monitor in this network namespace through the real kernel socket and the real libudev parser,
exactly as an event from udevd would: hot-plug without touching hardware.
"""

from __future__ import annotations

import itertools
import socket
import struct

NETLINK_KOBJECT_UEVENT = 15
UDEV_GROUP = 2
MAGIC = 0xFEEDCAFE
HEADER = struct.Struct("!8sI")  # prefix, magic (network order)
SIZES = struct.Struct("=III")  # header size, properties offset, properties length (host order)
FILTERS = struct.Struct("!IIII")  # subsystem hash, devtype hash, tag bloom hi/lo (network order)
HEADER_SIZE = HEADER.size + SIZES.size + FILTERS.size
_seqnum = itertools.count(1_000_000)


def murmur2(data: bytes, seed: int = 0) -> int:
    """MurmurHash2 (32-bit), the hash libudev's socket filters compare."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (seed ^ len(data)) & mask
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * m) & mask
        k = ((k ^ (k >> 24)) * m) & mask
        h = ((h * m) & mask) ^ k
    rest = data[whole:]
    if rest:
        for i in reversed(range(len(rest))):
            h ^= rest[i] << (8 * i)
        h = (h * m) & mask
    h = ((h ^ (h >> 13)) * m) & mask
    return h ^ (h >> 15)


def message(action: str, devpath: str, subsystem: str, **properties: str) -> bytes:
    props = {"ACTION": action, "DEVPATH": devpath, "SUBSYSTEM": subsystem, "SEQNUM": str(next(_seqnum))}
    props.update(properties)
    body = b"".join(f"{k}={v}".encode() + b"\0" for k, v in props.items())
    head = HEADER.pack(b"libudev\0", MAGIC) + SIZES.pack(HEADER_SIZE, HEADER_SIZE, len(body))
    return head + FILTERS.pack(murmur2(subsystem.encode()), 0, 0, 0) + body


def send(action: str, devpath: str, subsystem: str, **properties: str) -> None:
    """Multicast one udevd-style event (needs CAP_NET_ADMIN; raises PermissionError without)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_KOBJECT_UEVENT) as s:
        s.bind((0, 0))
        s.sendto(message(action, devpath, subsystem, **properties), (0, UDEV_GROUP))
