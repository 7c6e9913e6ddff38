"""Strategy-specific instruments: parameter servers, reductions and loss scaling, distributed values."""
