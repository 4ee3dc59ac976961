"""Scenarios, their predictions and accuracy, the fit of the engine factors, online calibration from observations."""
