"""The small learning library the combining gates share: the feature combiner
(``features``), its logistic heads (``logistic``) and boosted trees (``trees``)."""

from .features import (
    KIND,
    MODELS,
    BoostingParams,
    FeatureCombiner,
    Model,
    Projection,
    default_threshold,
    fit_feature_combiner,
    refit_feature_combiner,
)

__all__ = [
    "KIND",
    "MODELS",
    "BoostingParams",
    "FeatureCombiner",
    "Model",
    "Projection",
    "default_threshold",
    "fit_feature_combiner",
    "refit_feature_combiner",
]
