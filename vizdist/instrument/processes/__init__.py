"""The processes vizdist starts: the supervisor, ``LocalCluster`` and its workers, the job-folder protocol, shard files."""
