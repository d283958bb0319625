"""The host's network as the NIC driver needs it, with no driver knowledge: links and network
namespaces through iproute2 and nsenter (iplink.py), and which interfaces carry the node's own
traffic (uplink.py)."""
