"""Model answer to notebook 07_finding_a_bad_element's exercise: it replaces the line marked `# edit me`.

readings[5] is 4.0, so source element 5 becomes 1/0 = inf. Batches of 8 split into 2 per replica over 4
replicas: elements 4 and 5 go to replica 2 in step 0.
"""

my_guess = {"source": 5, "step": 0, "replica": 2}
