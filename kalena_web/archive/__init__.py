"""Archive: recorded replay runs, their per-node and per-workload time series and the batch lifecycle."""
