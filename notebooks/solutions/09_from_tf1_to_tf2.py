"""Model answer to notebook 09_from_tf1_to_tf2's exercise: it replaces the line marked `# edit me`."""

ported = vizdist.trace_distribution(v2, dataset_fn=input_fn)  # input_fn batches per replica: its TF2 home is distribute_datasets_from_function, not experimental_distribute_dataset
