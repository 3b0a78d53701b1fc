"""The training steps on JAX: each update one compiled XLA program over the
weights as arrays, and data parallelism with `keras.distribution`.

The update is a pure function of the state (trainable weights, the other
model variables such as dropout's seeds, the optimizer's slots and step)
and a batch, compiled with `jax.jit` once per batch shape (the data pipeline
pads batches to a few shapes: `data.shape_boundaries`) with the state's
buffers donated, so that XLA updates the weights in place and fuses the
element-wise work (layer norms, dropout, residuals, the loss over the
vocabulary, Adam's update) into the matmuls' neighbours. Between updates the
state stays on the devices; the model's Keras variables are written back
only when something outside the steps reads them (`sync`: validation BLEU,
checkpoints, the end of training), as Keras' own JAX `fit` does.

With a `keras.distribution.DataParallel` distribution the variables are
replicated on every device (they are created in its scope), each batch is
split by rows between the devices, and XLA adds the all-reduce of the
gradients to the compiled update. On several hosts (after
`keras.distribution.initialize`) every process reads the same global batches
and puts its own rows on its own devices, so that all of them agree on the
batch's shape.

Each update returns its sums of the loss statistics and the next learning
rate in one array: one transfer from the device a step, read after the
next update is dispatched (`train_step`), so that the host's work between
updates overlaps the device's.

Imports no TensorFlow (`benchmarks/train_throughput.py --backend jax` times
this step on GPU machines that have none).
"""

import contextlib
import time

import jax
import jax.numpy as jnp
import keras
import numpy as np

from keras_transformer.training.loop import SUMS, TrainingLoop
from keras_transformer.training.loss import token_statistics


class JaxTrainer(TrainingLoop):
    """Trains a `Transformer` (or any model with `{source_ids, target_ids}`
    inputs and logits output) on the JAX backend.

    Args:
        model: the model, created in `distribution.scope()` if one is given.
        optimizer: its optimizer, created there too.
        distribution: a `keras.distribution.DataParallel`, or None for one
            device.
        label_smoothing: eps_ls.
        accumulation_steps: micro-batches per update (their gradients are
            summed before one update).
        pad_id: the label id that is padding (default: `model.config.pad_id`).

    "mixed_bfloat16" needs no loss scaling; "mixed_float16", which does,
    trains on TensorFlow (`backends.check` refuses it here).
    """

    def __init__(self, model, optimizer, distribution=None, label_smoothing=0.1,
                 accumulation_steps=1, pad_id=None):
        self._set_recipe(model, label_smoothing, accumulation_steps, pad_id)
        self.distribution = distribution
        with _scope(distribution):
            optimizer.build(model.trainable_variables)
        self.optimizer = optimizer
        self._schedule_variables = _schedule_variables(optimizer)
        self._state = None  # (trainable, non-trainable, optimizer) arrays while training
        self._step = None
        self._learning_rate = None
        self._next = None  # the next update's micro-batches, already on the devices
        self._pending = None  # the last update's statistics, not yet read from the device
        self.first_updates = {}
        """Seconds of the first update of each batch shape (its compilation
        included), by `(rows, source length, target length)`."""
        state_shardings = None
        if distribution is not None:
            state_shardings = tuple([v.value.sharding for v in variables]
                                    for variables in self._variables())
        self._update = jax.jit(self._update_function, donate_argnums=0,
                               out_shardings=(state_shardings, None))
        self._gradients = jax.jit(self._gradients_function, donate_argnums=1)
        self._add = jax.jit(lambda total, more: jax.tree.map(jnp.add, total, more),
                            donate_argnums=0)
        self._apply = jax.jit(self._apply_function, donate_argnums=(0, 1, 2))
        self._statistics = jax.jit(self._statistics_function)

    # ------------------------------------------------------------ the state

    def _variables(self):
        return (self.model.trainable_variables, self.model.non_trainable_variables,
                self.optimizer.variables)

    def _current_state(self):
        if self._state is None:
            return tuple([v.value for v in variables] for variables in self._variables())
        return self._state

    def sync(self):
        """Writes the state of the updates into the Keras variables (which
        the next update's donated buffers then belong to again)."""
        if self._state is None:
            return
        for variables, values in zip(self._variables(), self._state):
            for variable, value in zip(variables, values):
                variable.assign(value)
        self._state = None

    @property
    def step(self):
        if self._state is None:
            return int(self.optimizer.iterations.value)
        return self._step

    @property
    def learning_rate(self):
        if self._learning_rate is None:
            return float(self.optimizer.learning_rate)
        return self._learning_rate

    @property
    def chief(self):
        return jax.process_index() == 0

    @property
    def validates_everywhere(self):
        return jax.process_count() > 1

    # ------------------------------------------------------------ the steps

    def _loss(self, trainable, non_trainable, optimizer_values, inputs, labels, tokens):
        logits, non_trainable = self.model.stateless_call(trainable, non_trainable, inputs,
                                                          training=True)
        stats = token_statistics(labels, logits, self.label_smoothing, self.pad_id)
        loss = stats["loss"] / tokens
        return loss, (jnp.stack([stats[key] for key in SUMS]), non_trainable)

    def _gradients_function(self, trainable, non_trainable, optimizer_values, inputs, labels,
                            tokens):
        (_, (stats, non_trainable)), gradients = jax.value_and_grad(self._loss, has_aux=True)(
            trainable, non_trainable, optimizer_values, inputs, labels, tokens)
        return gradients, non_trainable, stats

    def _apply_function(self, trainable, optimizer_values, gradients, schedule_values):
        # `optimizer.stateless_apply`, with the learning-rate schedule's own
        # variables mapped too (`LinearDecaySchedule.total_steps`, which
        # `TimeBudget` moves while training): a variable read inside a
        # compiled function without a mapping would be compiled in as the
        # constant it held at the first update.
        mapping = (list(zip(self.model.trainable_variables, trainable))
                   + list(zip(self.optimizer.variables, optimizer_values))
                   + list(zip(self._schedule_variables, schedule_values)))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            self.optimizer.apply(gradients)
            learning_rate = keras.ops.cast(self.optimizer.learning_rate, "float32")
        return ([scope.get_current_value(v) for v in self.model.trainable_variables],
                [scope.get_current_value(v) for v in self.optimizer.variables], learning_rate)

    def _update_function(self, state, inputs, labels, tokens, schedule_values):
        trainable, non_trainable, optimizer_values = state
        gradients, non_trainable, stats = self._gradients_function(
            trainable, non_trainable, optimizer_values, inputs, labels, tokens)
        trainable, optimizer_values, learning_rate = self._apply_function(
            trainable, optimizer_values, gradients, schedule_values)
        return (trainable, non_trainable, optimizer_values), jnp.append(stats, learning_rate)

    def _statistics_function(self, trainable, non_trainable, inputs, labels):
        logits, _ = self.model.stateless_call(trainable, non_trainable, inputs, training=False)
        stats = token_statistics(labels, logits, self.label_smoothing, self.pad_id)
        return jnp.stack([stats[key] for key in SUMS])

    def lowered_update(self, inputs, labels):
        """The update of a batch of this shape, lowered for XLA (`.compile()`
        it for XLA's `cost_analysis` and `memory_analysis`, as
        `benchmarks/train_throughput.py --analyze` does); runs nothing."""
        tokens = np.float32(max(1, np.count_nonzero(labels != self.pad_id)))
        return self._update.lower(self._current_state(), inputs, labels, tokens,
                                  [v.value for v in self._schedule_variables])

    # ------------------------------------------------------------- the data

    def _put(self, array):
        """A global batch's array on the devices: whole on the default
        device, or split by rows over the distribution's devices (this
        process's rows, on several hosts)."""
        if self.distribution is None:
            return jax.device_put(array)
        sharding = self.distribution.get_data_layout(array.shape).backend_layout
        processes, index = jax.process_count(), jax.process_index()
        rows = array.shape[0] // processes
        return jax.make_array_from_process_local_data(
            sharding, array[index * rows:(index + 1) * rows], array.shape)

    def _take(self, iterator):
        """The next update's micro-batches on the devices, and the real
        target tokens of all of them."""
        batches = [next(iterator) for _ in range(self.accumulation_steps)]
        tokens = sum(int(np.count_nonzero(labels != self.pad_id)) for _, labels in batches)
        placed = [({name: self._put(ids) for name, ids in inputs.items()}, self._put(labels))
                  for inputs, labels in batches]
        return placed, np.float32(max(tokens, 1))

    def _training_iterator(self, dataset):
        iterator = dataset.as_numpy_iterator() if hasattr(dataset, "as_numpy_iterator") \
            else iter(dataset)
        self._next = None
        return iterator

    def train_step(self, iterator):
        """One update from the next `accumulation_steps` micro-batches of
        `iterator` (NumPy `({"source_ids", "target_ids"}, labels)`).

        Returns the `SUMS` of the update before this one: an update's
        statistics are read from the device only after the next update is
        dispatched, so that the device has that update queued while the
        host waits, instead of idling while the host dispatches it (JAX's
        handling of the ~600 state arrays and XLA's launch of the update's
        CUDA graph; docs/benchmarks-log.md, "On JAX and on GPUs").
        `pending_sums` returns the last update's. The first update of a
        batch shape (compiled in this call) returns its own `SUMS` too,
        after waiting for them, to time its compilation. The
        micro-batches of the next update are put on the devices while this
        one runs."""
        batches, tokens = self._next or self._take(iterator)
        shape = tuple(np.shape(batches[0][0]["source_ids"])) + (np.shape(batches[0][1])[1],)
        first = shape not in self.first_updates
        started = time.perf_counter()
        step = self.step
        state, schedule_values = self._current_state(), [v.value for v in self._schedule_variables]
        if self.accumulation_steps == 1:
            (inputs, labels), = batches
            self._state, totals = self._update(state, inputs, labels, tokens, schedule_values)
        else:
            trainable, non_trainable, optimizer_values = state
            gradients, totals = None, 0.0
            for inputs, labels in batches:
                more, non_trainable, stats = self._gradients(
                    trainable, non_trainable, optimizer_values, inputs, labels, tokens)
                gradients = more if gradients is None else self._add(gradients, more)
                totals = totals + stats
            trainable, optimizer_values, learning_rate = self._apply(
                trainable, optimizer_values, gradients, schedule_values)
            self._state = (trainable, non_trainable, optimizer_values)
            totals = jnp.append(totals, learning_rate)
        self._step = step + 1
        earlier, self._pending = self._read(self._pending), totals
        try:
            self._next = self._take(iterator)
        except StopIteration:  # a finite iterator; the next call raises it again
            self._next = None
        if not first:
            return earlier
        sums = self.pending_sums()  # waits for the update
        self.first_updates[shape] = time.perf_counter() - started
        return {key: earlier.get(key, 0.0) + value for key, value in sums.items()}

    def pending_sums(self):
        """The `SUMS` of the last update, which `train_step` has not
        returned yet (waiting for it); `{}` if none."""
        pending, self._pending = self._pending, None
        return self._read(pending)

    def _read(self, totals):
        """`SUMS` from an update's output (`{}` for None), and the learning
        rate of the update after it."""
        if totals is None:
            return {}
        totals = np.asarray(totals)
        self._learning_rate = float(totals[-1])
        return dict(zip(SUMS, (float(value) for value in totals[:-1])))

    def _evaluation_sums(self, dataset):
        trainable, non_trainable, _ = self._current_state()
        for inputs, labels in dataset.as_numpy_iterator():
            stats = self._statistics(trainable, non_trainable,
                                     {name: self._put(ids) for name, ids in inputs.items()},
                                     self._put(labels))
            yield dict(zip(SUMS, (float(value) for value in np.asarray(stats))))


def _scope(distribution):
    return distribution.scope() if distribution is not None else contextlib.nullcontext()


def _schedule_variables(optimizer):
    """The Keras variables of the optimizer's learning-rate schedule."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    schedule = getattr(inner, "_learning_rate", None)  # where Keras keeps the schedule
    if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return []
    return [value for value in vars(schedule).values() if isinstance(value, keras.Variable)]
