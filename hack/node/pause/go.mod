// The sandbox ("pause") program of the real-node test tier's registry-free pause image.
module topodra.io/hack/node/pause

go 1.26.0
