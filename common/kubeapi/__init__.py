"""Every call topodra makes to the Kubernetes API, in one place.

    errors     one error family for every call (ApiError, NotFound, Conflict, Unusable)
    types      the shapes of the objects the code reads (ResourceClaim, ResourceSlice, Status)
    loader     the official `kubernetes` client, loaded with only the parts a driver uses
               (`Connection`: its configuration and REST layer, no `ApiClient`)
    rest       one raw JSON call through the official client's REST layer; watch streams
    keepalive  the claim GET on the prepare path: kept-alive connections, a bounded HTTP/1.1 reader
    claims     ResourceClaims: GET (quorum or watch cache), status update
    slices     ResourceSlices (and the Node they belong to): what the publisher needs
    reads      GET an object, LIST a collection page by page: what `check` and `explain` read

Nothing here is imported until used: `import topodra.common.kubeapi.errors` (or `.types`) loads
no part of the `kubernetes` package, and `loader` loads only what a call needs when it is made.
Objects travel as the API's own JSON (dicts, described by `types`), never through the client's
generated model classes.
"""
