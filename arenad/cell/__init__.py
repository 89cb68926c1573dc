"""A cell's pure folds: its state machine, retry policy, overdue check and spend, and the
supervisor arm's figures folded over its ingested journal (``supervisor_figures``). No
SQL, no I/O, no clock; ``writer`` appends to a cell through the store interface."""
