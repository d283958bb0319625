"""A small NRI (Node Resource Interface) client: how a driver hooks into containerd and CRI-O.

- `wire`: the multiplexed socket and ttrpc framing, pure functions over bytes;
- `conn`: one connection (ttrpc server for the runtime's calls, ttrpc client for ours);
- `plugin`: registration, Configure/Synchronize, event dispatch to a `Handler`, reconnects;
- `follower`: a `Handler` that keeps every container at the resources a driver's policy wants.

The messages are generated from proto/nri/v1alpha1/api.proto and proto/ttrpc/request.proto.
Nothing here knows about CPUs: drivers implement `plugin.Handler` or a `follower.Follower`'s policy.
"""
