"""The daemon: schedules cells and drives each through the state machine, writing
every transition to the log as it happens."""
