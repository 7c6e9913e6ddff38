"""Model answer to notebook 08_parameter_servers's exercise: it replaces the line marked `# edit me`."""

my_trace = cluster.run(run_ps, steps=6, stop="worker-0", stop_after=2)
