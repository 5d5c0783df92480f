"""`OneProcessExtended`: TF's private `StrategyExtended` hooks, named.

A custom `tf.distribute` strategy can only be written by subclassing
TensorFlow's private `StrategyExtendedV2` machinery. This base class is the
one place that does: it subclasses `one_device_strategy.OneDeviceExtended`
(one replica per process, on one device) and sends each private hook TF
calls to a public-named method that `strategy/hybrid_extended.py`
implements. Tested on TF 2.15.1, 2.16.2, 2.19.1 and 2.21.
"""

from tensorflow.python.distribute import one_device_strategy


class OneProcessExtended(one_device_strategy.OneDeviceExtended):
    """`StrategyExtended` of one replica per process (see the module
    docstring). Subclasses implement the methods that raise here."""

    # -- what the subclass implements

    def run_replica_step(self, fn, args, kwargs):
        """Runs `fn` as this process's replica (`strategy.run`)."""
        raise NotImplementedError

    def reduce_values(self, reduce_op, values) -> list:
        """Reduces each value across processes (`reduce`, the optimizer's
        gradient `all_reduce`)."""
        raise NotImplementedError

    def gather_values(self, value, axis):
        """Concatenates `value` of every process along `axis`."""
        raise NotImplementedError

    def update_variable(self, var, fn, args, kwargs, group):
        """Applies `fn` to `var` (the optimizer's update)."""
        raise NotImplementedError

    def create_variable(self, next_creator, kwargs):
        """Creates a variable under the strategy's scope."""
        raise NotImplementedError

    def distribute_dataset(self, dataset):
        """This process's part of a dataset of global batches."""
        raise NotImplementedError

    def distribute_datasets_from_function(self, dataset_fn):
        raise NotImplementedError

    def distribute_values_from_function(self, value_fn):
        raise NotImplementedError

    @property
    def replica_count(self) -> int:
        """Replicas in sync: the number of worker processes."""
        raise NotImplementedError

    # -- what it offers the subclass

    @property
    def device(self) -> str:
        """The device this process's replica runs on."""
        return self._device

    def container_strategy(self):
        """The `tf.distribute.Strategy` this extended belongs to."""
        return self._container_strategy()

    def stock_update(self, var, fn, args, kwargs, group):
        """`OneDeviceExtended`'s own update of `var`."""
        return super()._update(var, fn, args, kwargs, group)

    # -- TF's private hooks, sent to the methods above

    def _call_for_each_replica(self, fn, args, kwargs):
        return self.run_replica_step(fn, args, kwargs)

    def _reduce_to(self, reduce_op, value, destinations, options):
        del destinations, options
        return self.reduce_values(reduce_op, [value])[0]

    def _batch_reduce_to(self, reduce_op, value_destination_pairs, options):
        del options
        return self.reduce_values(
            reduce_op, [value for value, _ in value_destination_pairs]
        )

    def _gather_to_implementation(self, value, destinations, axis, options):
        del destinations, options
        return self.gather_values(value, axis)

    def _update(self, var, fn, args, kwargs, group):
        return self.update_variable(var, fn, args, kwargs, group)

    def _create_variable(self, next_creator, **kwargs):
        return self.create_variable(next_creator, kwargs)

    def _experimental_distribute_dataset(self, dataset, options):
        del options
        return self.distribute_dataset(dataset)

    def _distribute_datasets_from_function(self, dataset_fn, options):
        del options
        return self.distribute_datasets_from_function(dataset_fn)

    def _experimental_distribute_values_from_function(self, value_fn):
        return self.distribute_values_from_function(value_fn)

    @property
    def _num_replicas_in_sync(self):
        return self.replica_count

    def _in_multi_worker_mode(self):
        return self.replica_count > 1
