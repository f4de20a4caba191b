"""The MLflow ``pyfunc`` face of the served predictor (a module of its own: importing it imports MLflow)."""

from __future__ import annotations

from pathlib import Path

import mlflow.pyfunc
import numpy as np

from tasks.core.stages.serving import FaultPredictor


class PyfuncPredictor(mlflow.pyfunc.PythonModel):
    """``mlflow.pyfunc.load_model(...).predict(windows)``: raw feature windows [batch, window, elements, features]
    -> P(fault) [batch, elements]; the artifact ``served`` is the predictor's directory (``serving``)."""

    def load_context(self, context) -> None:
        self.predictor = FaultPredictor(Path(context.artifacts["served"]))

    def predict(self, context, model_input, params=None):
        return self.predictor.predict(np.asarray(model_input))
