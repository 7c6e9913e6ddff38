"""Model answer to notebook 10_cluster_topology's exercise: it replaces the line marked `# edit me`."""

my_tf_config = {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"], "ps": ["host3:2222"]}, "task": {"type": "worker", "index": 1}}
