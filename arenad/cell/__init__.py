"""The cell state machine: a pure fold of a cell's stream. No SQL, no I/O, no clock."""
