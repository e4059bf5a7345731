"""Export and command-line pieces shared by the zoo's trained sequence models (``vit``,
``rowrnn``): each trains in NumPy, writes its float ONNX graph, quantizes it with
onnxruntime's static quantizer on the training split and records the test accuracies of
all three (NumPy float, ONNX float, ONNX QDQ) in a JSON file shipped beside them."""

import argparse
import time
from pathlib import Path

import onnx

from .digits import accuracy, load_digits_split
from .reference import onnxruntime_session, quantize_with_onnxruntime
from .train_numpy import adam_fit, write_record

__all__ = ["export_main", "export_trained", "fit_on_digits"]


def fit_on_digits(params, forward, loss_and_grads, *, verbose=False, **fit_options):
    """Train ``params`` in place on the digits training split with
    :func:`~models.zoo.train_numpy.adam_fit` (``fit_options`` are its keywords), printing the
    loss and test accuracy every 10 epochs when ``verbose``; returns ``params``."""
    x_train, y_train, x_test, y_test = load_digits_split()

    def report(epoch, loss):
        print(f"epoch {epoch}: loss {loss:.4f}, test accuracy "
              f"{accuracy(forward(params, x_test), y_test):.2%}")

    return adam_fit(params, loss_and_grads, x_train, y_train,
                    report=report if verbose else None, **fit_options)


def export_trained(model, out_dir, params, *, train, forward, to_onnx, file_names,
                   verbose=False):
    """Train ``model`` (unless ``params`` is given), write its float and QDQ ONNX files and
    accuracy record into ``out_dir``; returns the three paths.

    ``file_names`` is ``(float_name, qdq_name, record_name)``; ``train``, ``forward`` and
    ``to_onnx`` are the model module's own functions.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if params is None:
        params = train(verbose=verbose)
    float_path, qdq_path, record_path = (out_dir / name for name in file_names)
    onnx.save(to_onnx(params), float_path)
    x_train, _, x_test, y_test = load_digits_split()
    quantize_with_onnxruntime(float_path, qdq_path, x_train)
    record = {"model": model, "test_samples": int(len(y_test)),
              "numpy_float_accuracy": accuracy(forward(params, x_test), y_test)}
    for key, path in (("float_accuracy", float_path), ("qdq_accuracy", qdq_path)):
        (logits,) = onnxruntime_session(path).run(None, {"input": x_test})
        record[key] = accuracy(logits, y_test)
    write_record(record_path, record)
    return float_path, qdq_path, record_path


def export_main(description, export, default_out, argv=None):
    """``python -m models.zoo.<model>``: retrain, export and print what was written."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", default=str(default_out), help="folder (default: the zoo)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    paths = export(args.out, verbose=True)
    for path in paths:
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    print(paths[-1].read_text().strip())
    print(f"done in {time.perf_counter() - started:.1f} s")
