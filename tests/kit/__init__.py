"""Helpers shared by the test tiers, one job per module.

- machines.py: synthetic machines (shipped specs) built once per session
- sysfs.py: hand-made sysfs trees, a few files per trap
- hwloc.py: Debian's hwloc as an independent reader of a tree (the discovery oracle)
- expected.py: the captured machines' expected views, computed from a Topology
- inventory.py: a driver as its inventory publishes it, and waiting with a deadline
- clock.py: a clock the test advances (loops written against common.clock.Clock)
- uevents.py: uevents as udevd sends them, through the kernel's socket
- build.py: running a tier's hack/*/build.sh and reading back its paths
- reports.py: a tier's log tails in the report of a failing test that used it
- imports.py: what code under test imports, whatever the interpreter loaded before it
"""
