"""`topodra explain`: why a claim fits a node or not, and at which locality it landed (pure).

A Pending pod says only "cannot allocate all claims". Given a claim, a node's ResourceSlices,
the DeviceClasses and what other claims already hold, this package works out per request which
devices could match (DeviceClass and request selectors evaluated with a CEL library; an
expression it cannot evaluate is reported as such, never guessed), which constraint rules
candidates out, whether the whole claim fits (a search in the scheduler's order, bounded), and,
for an allocated claim, the locality level of each accelerator-NIC pair. The command is
drivers/cli/explain.py; docs/design/prioritized-placement.md describes the scheduler's search
this mirrors.
"""
