"""topodra shared library: sysfs topology discovery and the kubelet-plugin runtime."""
