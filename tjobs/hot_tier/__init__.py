"""Near-term task changes reaching the node whose wheel holds the task's shard, before the task's instant."""
