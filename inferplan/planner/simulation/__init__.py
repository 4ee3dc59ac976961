"""The discrete-event simulator and the verification of a plan in it."""
