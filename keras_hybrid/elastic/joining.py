"""How `HybridStrategy` joins an elastic job (`keras-hybrid-run --min-np`).

No private hook is touched here.
"""

import tensorflow as tf
from absl import logging

from keras_hybrid.contract.elastic_board import DIR_ENV
from keras_hybrid.elastic.membership import ElasticMembership
from keras_hybrid.strategy import host_random
from keras_hybrid.strategy.cluster import ClusterInfo


def membership_for(engine: str, info: ClusterInfo):
    """The `ElasticMembership` the launcher set up, or None.

    Raises:
        NotImplementedError: If the job is elastic and `engine` is not
            `"tf"`.
        ValueError: If the job is elastic but has no cluster.
    """
    membership = ElasticMembership.from_env(info.rank)
    if membership is None:
        return None
    if engine != "tf":
        raise NotImplementedError(
            "Elastic training (keras-hybrid-run --min-np/--max-np) runs on "
            f"the TF engine. Received: engine={engine!r}. Use engine='tf', "
            "or Horovod's own elastic mode (horovodrun --min-np ... with "
            "hvd.elastic)."
        )
    if info.cluster_spec is None or info.size != membership.max_np:
        raise ValueError(
            f"{DIR_ENV} is set, so this is an elastic job, but TF_CONFIG "
            f"names {info.size} tasks where --max-np is "
            f"{membership.max_np}. Start elastic jobs with "
            "`keras-hybrid-run --min-np N --max-np M "
            "--host-discovery-script ...`."
        )
    logging.info(
        "keras-hybrid elastic: task %d, %s",
        info.rank,
        "joining"
        if membership.joining
        else f"rank {membership.rank} of {membership.size}",
    )
    return membership


def share_seed() -> None:
    """Gives every worker the same TF global seed without a collective
    (a joiner is in no group yet): the script's if it set one, else
    TensorFlow's default for seeded ops (`host_random.global_seed`), the
    same in every process."""
    tf.random.set_seed(host_random.global_seed())
