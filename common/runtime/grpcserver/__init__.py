"""A small gRPC server over HTTP/2 on unix sockets for the kubelet's services (docs in each module)."""
