"""Spend and its cap: the pure folds of what a campaign has spent (:mod:`arenad.budget.spend`)
and of where it stands against its cap (:mod:`arenad.budget.cap`)."""
