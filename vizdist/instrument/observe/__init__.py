"""What a run records beside where elements went: timing, placement (with NaN/Inf checks), topology, collectives."""
