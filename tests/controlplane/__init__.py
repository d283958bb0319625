"""The real control-plane tier: etcd, kube-apiserver, kube-scheduler, kube-controller-manager on loopback."""
