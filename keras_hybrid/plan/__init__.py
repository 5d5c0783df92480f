"""The routing plan: which variable travels which way, as data to print."""

from keras_hybrid.plan.kind_overrides import KINDS
from keras_hybrid.plan.routing_plan import RoutingPlan
from keras_hybrid.plan.routing_plan import VariablePlan
from keras_hybrid.plan.routing_plan import make_plan

__all__ = ["KINDS", "RoutingPlan", "VariablePlan", "make_plan"]
