"""Teaching experiments on real TensorFlow: what-if knobs, the auto-shard policy comparison."""
