"""Discovery's name tests (common/topology/names.py) answer exactly what the regular expressions
they replaced answered, on valid names, on every one-character edit of them (ASCII, a non-ASCII
decimal digit, a newline) and on seeded random strings over the characters that matter."""

from __future__ import annotations

import random
import re

from topodra.common.topology.names import is_mac, is_numbered, is_pci_address, is_root_bus, numbered

PCI = re.compile(r"[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\Z")
ROOT = re.compile(r"pci[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}\Z")
MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2})+\Z")
NUMBERED = {prefix: re.compile(rf"{prefix}(\d+)\Z") for prefix in ("cpu", "node", "index", "vfio", "card")}
PAIR = re.compile(r"(card|renderD)\d+\Z")

ALPHABET = "0123456789abcdefABCDEFgGxX:.-_ pci\n\u0663\u0969\uff11\u00b2"
VALID = (
    "0000:00:01.0", "0000:3b:00.7", "10000:00:00.0", "ABCD:EF:0a.1", "0000:00:1f.8", "0000:00:1f.",
    "pci0000:00", "pci10000:3a", "pciABCD:ef", "pci000:00", "pci0000:0",
    "00:11:22:33:44:55", "aa:BB", "a0:00:00:00:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:0b:0c", "00",
    "cpu0", "cpu127", "node3", "index10", "vfio0", "card1", "renderD128", "cpu", "cpu\u0663",
)  # fmt: skip


def edits(word: str) -> set[str]:
    out = {word, word + "\n", "\n" + word, word[:-1], word[1:]}
    for i in range(len(word) + 1):
        for c in ALPHABET:
            out.add(word[:i] + c + word[i:])
            if i < len(word):
                out.add(word[:i] + c + word[i + 1 :])
    return out


def corpus() -> set[str]:
    rng = random.Random(18)
    words = set(VALID)
    for w in VALID:
        words |= edits(w)
    for _ in range(20000):
        words.add("".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 14))))
    return words


def test_the_name_tests_agree_with_the_patterns_they_replace() -> None:
    words = corpus()
    assert len(words) > 20000
    for w in words:
        assert is_pci_address(w) == bool(PCI.match(w)), repr(w)
        assert is_root_bus(w) == bool(ROOT.match(w)), repr(w)
        assert is_mac(w) == bool(MAC.match(w)), repr(w)
        assert is_numbered(w, "card", "renderD") == bool(PAIR.match(w)), repr(w)
        for prefix, pattern in NUMBERED.items():
            m = pattern.match(w)
            assert numbered(w, prefix) == (int(m.group(1)) if m else None), repr(w)
            assert is_numbered(w, prefix) == bool(m), repr(w)
    # the corpus reaches both answers of every test
    assert {is_pci_address(w) for w in words} == {True, False}
    assert {is_root_bus(w) for w in words} == {True, False}
    assert {is_mac(w) for w in words} == {True, False}
    assert numbered("cpu\u0663", "cpu") == 3  # as int() reads what \d matched
