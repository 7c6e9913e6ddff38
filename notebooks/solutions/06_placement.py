"""Model answer to notebook 06_placement's exercise: it replaces the line marked `# edit me`.

Without fetch_to_device the batch stays on the host (CPU:0) where the pipeline made it; the step still runs
on the strategy's device, CPU:2, so the step reads the batch from CPU:0 when it runs (a copy CPU:0 -> CPU:2).
"""

my_guess = {"batch arrives on": "CPU:0", "Mul runs on": "CPU:2", "copy": ("CPU:0", "CPU:2")}
