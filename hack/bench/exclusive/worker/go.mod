module topodra.local/bench/exclusive/worker

go 1.26
