"""Model answer to notebook 03_multi_worker_sharding's exercise: it replaces the line marked `# edit me`.

Number the lines inside the function that reads one file: auto-sharding then shards the list of files
(the input of the interleave, whose function holds the reader), and each file's count starts at 0.
"""

ds = tf.data.Dataset.from_tensor_slices(files).interleave(
    lambda f: tf.data.TextLineDataset(f).enumerate(), cycle_length=1)
