"""The three topodra kubelet DRA drivers: cpu, accelerator, nic."""
