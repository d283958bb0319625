"""The three topodra kubelet DRA drivers (cpu, accelerator, nic), the registry that builds them from
flags, and the `topodra` command (cli/) that composes them with the discovery library in common/."""
