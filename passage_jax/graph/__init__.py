"""Graph stage: GraphSpec, the move table, the cost-model registry, edge-cost
field kernels, legality masks and float64 route recosting (SPEC §2)."""
from passage_jax.graph.spec import (  # noqa: F401
    DIAGONAL, MOVES, OBJECTIVE_COLUMN, OBJECTIVES, STEP_PIXELS, VARIANTS, GraphSpec, move_index,
)
from passage_jax.graph.costs import (  # noqa: F401
    COST_MODELS, MODEL_INDEX, MODEL_NAMES, CostModel, CropStats, crop_stats, edge_cost_field,
    edge_cost_field_batched, edge_cost_field_by_index, edge_cost_field_np, get_cost_model,
    legal_move_mask, step_cost,
)
from passage_jax.graph.routes import (  # noqa: F401
    as_route_array, route_cost, route_length_pixels, route_problem, route_step_costs,
)
