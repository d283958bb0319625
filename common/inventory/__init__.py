"""A driver's device list and health: when to scan, what is published, what the health stream says.

See inventory.py; the driver-facing declarations are in contract.py.
"""

from topodra.common.inventory.contract import InventoryHandle, Policy
from topodra.common.inventory.inventory import DevicesTo, Inventory, Snapshot

__all__ = ["DevicesTo", "Inventory", "InventoryHandle", "Policy", "Snapshot"]
