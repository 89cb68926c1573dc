"""Agent runs: process groups, the run wrapper and its launcher, and the executors that
start, observe, cancel and re-attach runs."""
