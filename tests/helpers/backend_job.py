"""Loads the `.keras` files another backend wrote, in a process of its own
(`KERAS_BACKEND` set by the caller), and reports what they compute here.

    python -m helpers.backend_job FOLDER NAME [NAME ...]

For each NAME, reads `FOLDER/NAME.keras` (with `safe_mode=True`) and the ids
in `FOLDER/NAME.npz`, and writes, with this process's backend as BACKEND:
`FOLDER/NAME.BACKEND.npz` holding `logits` (the full pass) and `steps` (the
same rows from cached decoding, one position at a time), and
`FOLDER/NAME.BACKEND.keras`, the model saved again from this backend. A
compiled model's optimizer class and the padding id of its loss go into
the `.npz` too (`optimizer`, `loss_pad_id`; "" and -1 when not compiled).
"""

import sys

import keras
import numpy as np

import keras_transformer.models  # noqa: F401  (registers the classes with Keras)
import keras_transformer.training  # noqa: F401  (and the loss, schedule and optimizer)


def main(folder, names):
    backend = keras.backend.backend()
    for name in names:
        ids = np.load(f"{folder}/{name}.npz")
        source, target = ids["source_ids"], ids["target_ids"]
        model = keras.models.load_model(f"{folder}/{name}.keras", safe_mode=True)
        logits = model({"source_ids": source, "target_ids": target})
        cache = model.initial_cache(model.encode(source), source, max_length=target.shape[1])
        steps = []
        for step in range(target.shape[1]):
            step_logits, cache = model.decode_step(target[:, step:step + 1], step, cache)
            steps.append(keras.ops.convert_to_numpy(step_logits)[:, 0])
        compiled = model.compiled
        np.savez(f"{folder}/{name}.{backend}.npz", logits=keras.ops.convert_to_numpy(logits),
                 steps=np.stack(steps, axis=1),
                 optimizer=type(model.optimizer).__name__ if compiled else "",
                 loss_pad_id=model.loss.pad_id if compiled else -1)
        model.save(f"{folder}/{name}.{backend}.keras")
    print(f"{backend}: {len(names)} models")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
