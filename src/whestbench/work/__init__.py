"""Work layer: units, the plan, the resume ledger and the loop that runs units."""
